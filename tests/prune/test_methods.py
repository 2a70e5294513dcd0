"""The method registry drives both reduction paths: with every method's score function replaced
by planted scores (a fixed value per original position, a different table per method), the
tokens hard pruning removes and the tokens the CLS reduction merges away are exactly the ones the
named method's planted scores rank lowest; ToMe's matching, given planted keys, merges exactly
the planted pairs. The blocks are observed through a host's ``pruning_block`` hook, which is
handed the running tokens and their positions."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest
import torch
import yaml
from conftest import REPO

from taskgeom.metric.head import ImportanceHead
from taskgeom.metric.spn import SpectralPullbackNetwork
from taskgeom.models.dpt import TinyDPT
from taskgeom.models.host import freeze
from taskgeom.models.vit import Grid, TimmViTHost, tiny_vit
from taskgeom.pipeline import registry
from taskgeom.prune import protocol
from taskgeom.prune.cls_merge import merged_forward_from, unreduced_prefix
from taskgeom.prune.llf import pruned_forward, stage_counts
from taskgeom.prune.methods import METHODS, NAMES, Method, lookup
from taskgeom.prune.scores import LearnedMetric
from taskgeom.prune.select import num_removed
from taskgeom.prune.timm_blocks import AttentionStats, TimmAttentionBlock

SCORED = [name for name, m in METHODS.items() if m.score is not None]
PAIRS = (2, 6, 10, 14)  # A tokens (even) planted onto their B neighbour (odd): what ToMe must merge


@dataclass
class Call:
    """One block run through the hook."""

    i: int
    kind: str                 # "forward" or "stats"
    positions: torch.Tensor | None
    x: torch.Tensor
    size: torch.Tensor | None
    out: torch.Tensor | None


class Recording:
    """A host (delegated to) with the pruning hook, logging every block it hands out; ``keys``
    replaces the attention keys of every statistics pass."""

    def __init__(self, host, keys: torch.Tensor | None = None):
        self.host, self.keys, self.log = host, keys, []

    def __getattr__(self, name):
        return getattr(self.host, name)

    def pruning_block(self, i, ctx, positions=None):
        return Logged(TimmAttentionBlock(self.host.vit.blocks[i]), i, positions, self)

    def calls(self, i: int) -> list[Call]:
        return [c for c in self.log if c.i == i]


@dataclass
class Logged:
    inner: TimmAttentionBlock
    i: int
    positions: torch.Tensor | None
    owner: Recording

    def forward(self, x, size=None):
        self.owner.log.append(Call(self.i, "forward", self.positions, x, size, None))
        return self.inner.forward(x, size)

    def with_stats(self, x, size=None):
        out, stats = self.inner.with_stats(x, size)
        if self.owner.keys is not None:
            stats = AttentionStats(keys=self.owner.keys, cls_attn=stats.cls_attn)
        self.owner.log.append(Call(self.i, "stats", self.positions, x, size, out))
        return out, stats


@pytest.fixture(scope="module")
def cls_host():
    torch.manual_seed(0)
    return freeze(TimmViTHost(tiny_vit(32, 4, 2, 8, 32, num_classes=5)))


@pytest.fixture(scope="module")
def dpt_host():
    torch.manual_seed(0)
    return freeze(TinyDPT(32, 4, 2, 8, 32, read_layers=(0, 1, 2, 3), head_features=16))


def learned() -> LearnedMetric:
    torch.manual_seed(1)
    return LearnedMetric(ImportanceHead(17, 32, 16).eval(), Grid(1, 4, 4),
                         SpectralPullbackNetwork(17, 32, 4, 16, 1, 2).eval())


def plant(monkeypatch, batch: int, tokens: int) -> dict[str, torch.Tensor]:
    """Every scored method's score replaced by a fixed random value per original position, a
    different table per method; returns the tables (batch, tokens)."""
    tables = {}
    for j, name in enumerate(SCORED):
        table = torch.rand(batch, tokens, generator=torch.Generator().manual_seed(100 + j))
        tables[name] = table
        monkeypatch.setitem(METHODS, name, replace(METHODS[name], score=lambda h, idx, *_, t=table: t.gather(1, idx)))
    return tables


def highest(table: torch.Tensor, kept: int, prefix: int = 1) -> list[list[int]]:
    """Per item: the prefix and the ``kept`` patch positions of highest planted score, ascending."""
    out = []
    for row in table.tolist():
        patches = sorted(range(prefix, len(row)), key=lambda t: row[t], reverse=True)[:kept]
        out.append(sorted([*range(prefix), *patches]))
    return out


def test_the_registry_holds_the_pipelines_methods_in_order_and_the_schema_agrees():
    assert NAMES == ("random", "tome_score", "evit", "tome", "importance") == tuple(METHODS)
    schema = yaml.safe_load((REPO / "src/taskgeom/params.schema.yaml").read_text())
    assert tuple(schema["$defs"]["prune_methods"]["items"]["enum"]) == NAMES
    assert registry.PRUNE_METHODS == protocol.METHODS == NAMES
    assert all(lookup(name) is m and m.name == name for name, m in METHODS.items())


@pytest.mark.parametrize("call", [lambda: lookup("tomee"),
                                  lambda: pruned_forward(None, "depth", None, [0], "tomee", 0.5)])
def test_an_unknown_method_is_refused_in_one_line_naming_the_known_ones(call):
    with pytest.raises(ValueError) as err:
        call()
    assert str(err.value) == "unknown pruning method 'tomee'; known: random, tome_score, evit, tome, importance"


def test_a_method_runs_once_unless_its_output_depends_on_the_seed():
    runs = {name: [c for _, c in protocol.seed_runs(name, [0, 1, 2])] for name in NAMES}
    assert runs == {"random": [True] * 3, "importance": [True] * 3, "tome_score": [True, False, False],
                    "evit": [True, False, False], "tome": [True, False, False]}


@pytest.mark.parametrize("method", SCORED)
def test_hard_pruning_removes_exactly_the_lowest_scored_tokens(dpt_host, monkeypatch, method):
    x = torch.randn(2, 3, 32, 32)
    tables = plant(monkeypatch, 2, 17)
    host = Recording(dpt_host)
    pruned_forward(host, "depth", x, [0, 1], method, 0.5, False, None, torch.Generator().manual_seed(0))
    first, _ = stage_counts(num_removed(16, 0.5), 2)
    # block 1 runs on the survivors of the first stage, blocks 2 and 3 on those of both
    assert [c.positions.tolist() for c in host.calls(1)] == [highest(tables[method], 16 - first)]
    for i in (2, 3):
        assert [c.positions.tolist() for c in host.calls(i)] == [highest(tables[method], 8)]
    assert [c.x.shape[1] for c in host.calls(3)] == [9]


@pytest.mark.parametrize("method", SCORED)
def test_cls_reduction_merges_away_exactly_the_lowest_scored_tokens(cls_host, monkeypatch, method):
    x = torch.randn(2, 3, 32, 32)
    tables = plant(monkeypatch, 2, 17)
    host = Recording(cls_host)
    prefix = unreduced_prefix(cls_host, x, 1)
    merged_forward_from(host, "cls", prefix, 1, method, 0.5, learned(), torch.Generator().manual_seed(0))
    kept = highest(tables[method], 8)
    (after,) = host.calls(2)
    if METHODS[method].merge == "fuse":  # the survivors as they were, then one token fused from the rest
        (reduction,) = [c for c in host.calls(1) if c.kind == "stats"]
        assert after.positions is None and after.size is None and after.x.shape[1] == 9 + 1
        for b in range(2):
            assert torch.equal(after.x[b, :9], reduction.out[b, kept[b]])
            drop = sorted(set(range(17)) - set(kept[b]))
            w = tables[method][b, drop, None]
            torch.testing.assert_close(after.x[b, 9], (w * reduction.out[b, drop]).sum(0) / w.sum())
    else:  # each survivor absorbs removed tokens and keeps its position
        assert after.positions.tolist() == kept
        assert after.size.sum(dim=1).flatten().tolist() == [17.0, 17.0] and bool((after.size[:, 0] == 1).all())


def planted_keys(batch: int = 2, tokens: int = 17) -> torch.Tensor:
    """Random keys with each A token of ``PAIRS`` a copy of the B token after it (cosine 1)."""
    keys = torch.randn(batch, tokens, 64, generator=torch.Generator().manual_seed(7))
    for t in PAIRS:
        keys[:, t] = keys[:, t + 1]
    return keys


def check_planted_merge(reduction: Call, after: Call) -> None:
    """The tokens entering the block after ToMe's merge: the unmerged A tokens as they were, then
    every B token, each planted pair's the mean of the two."""
    out = reduction.out
    unmerged = [t for t in range(0, 17, 2) if t not in PAIRS]
    assert after.x.shape[1] == 17 - len(PAIRS) and after.positions is None
    assert torch.equal(after.x[:, :len(unmerged)], out[:, unmerged])
    b_tokens = after.x[:, len(unmerged):]
    for j, t in enumerate(range(1, 17, 2)):
        want = (out[:, t] + out[:, t - 1]) / 2 if t - 1 in PAIRS else out[:, t]
        torch.testing.assert_close(b_tokens[:, j], want)
    assert after.size[:, len(unmerged):].flatten(1).tolist() == [[2.0 if t - 1 in PAIRS else 1.0
                                                                  for t in range(1, 17, 2)]] * 2


def test_tome_merges_exactly_the_best_matched_pairs_when_pruning(dpt_host):
    host = Recording(dpt_host, keys=planted_keys())
    pruned_forward(host, "depth", torch.randn(2, 3, 32, 32), [0], "tome", 0.25, False)
    (reduction,) = host.calls(0)
    check_planted_merge(reduction, host.calls(1)[0])


def test_tome_merges_exactly_the_best_matched_pairs_in_the_cls_reduction(cls_host):
    host = Recording(cls_host, keys=planted_keys())
    x = torch.randn(2, 3, 32, 32)
    merged_forward_from(host, "cls", unreduced_prefix(cls_host, x, 1), 1, "tome", 0.25)
    (reduction,) = host.calls(1)
    check_planted_merge(reduction, host.calls(2)[0])


def test_a_new_method_is_one_record(cls_host, dpt_host, monkeypatch):
    """A method added to the registry alone runs on both paths and removes its lowest scores."""
    norm = Method("norm", "feature norm", lambda h, idx, *_: h.norm(dim=-1), attention=False, learned=False,
                  seeded=False, merge="keys")
    monkeypatch.setitem(METHODS, "norm", norm)
    x = torch.randn(2, 3, 32, 32)
    host = Recording(dpt_host)
    pruned_forward(host, "depth", x, [1], "norm", 0.5, False)
    (entering,) = host.calls(2)
    h, ctx = dpt_host.embed(x)
    state1 = dpt_host.block(1, dpt_host.block(0, h, ctx), ctx)
    assert entering.positions.tolist() == highest(state1.norm(dim=-1), 8)
    host = Recording(cls_host)
    merged_forward_from(host, "cls", unreduced_prefix(cls_host, x, 1), 1, "norm", 0.5)
    (reduction,) = [c for c in host.calls(1) if c.kind == "stats"]
    assert host.calls(2)[0].positions.tolist() == highest(reduction.out.norm(dim=-1), 8)
