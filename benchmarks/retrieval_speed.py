"""Search cost of task-induced retrieval: queries per second of DRM over a gallery, against
cosine, and of the two-stage search (cosine shortlist, DRM rerank of the shortlist only), at
several gallery sizes, with the two-stage recall of DRM's own top-k.

Galleries are the layer-L features of the world's training images (the probe of params.yaml's
first `retrieval` entry); the DRM is the `retrieval` stage's (data/retrieval/<name>/). Gallery
embeddings (projections and token weights; for cosine the normalised features) are computed once,
as an index would store them; the timed query includes embedding the query. The DRM's index holds
N·k numbers per image against cosine's N·D, so a full DRM scan can cost less than cosine's. \
Every distance is a batched matrix product or gather
(`taskgeom.retrieval.drm.cross_distance`, `pair_distance`), never a loop over pairs.

Results: results/benchmarks/retrieval_speed.{csv,md}.

    python benchmarks/retrieval_speed.py [--sizes 500 1500 3000] [--queries 50] [--shortlist 50]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from stamp import write_stamped

from taskgeom.data.splits import read_world, to_input
from taskgeom.models import zoo
from taskgeom.models.host import forward_states, freeze
from taskgeom.pipeline import config
from taskgeom.pipeline.runtime import machine
from taskgeom.retrieval.drm import cross_distance, load_drm, pair_distance
from taskgeom.retrieval.evaluate import recall_at_k

OUT = Path("results/benchmarks")


@torch.no_grad()
def features(host, layer: int, rgb: np.ndarray, batch: int = 128) -> torch.Tensor:
    return torch.cat([forward_states(host, to_input(rgb[i:i + batch]), layer)[0][layer]
                      for i in range(0, len(rgb), batch)])


def timed(fn, repeats: int = 3):
    best, out = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[500, 1500, 3000])
    ap.add_argument("--queries", type=int, default=50)
    ap.add_argument("--shortlist", type=int, default=50)
    ap.add_argument("--k", type=int, default=5)
    args = ap.parse_args()
    params = config.load("params.yaml")
    name, cfg = next(iter(params["retrieval"].items()))
    host = freeze(zoo.load_named(cfg["model"]))
    drm = load_drm(f"data/retrieval/{name}/model.safetensors", f"data/retrieval/{name}/config.json")
    gallery_all = features(host, cfg["layer"],
                           read_world("data/world/train.h5", keys=("rgb",), limit=max(args.sizes))["rgb"])
    queries = features(host, cfg["layer"], read_world("data/world/test.h5", keys=("rgb",), limit=args.queries)["rgb"])
    rows = []
    with torch.no_grad():
        for size in args.sizes:
            G = gallery_all[:size]
            index_s, (P, w) = timed(lambda: drm.embed(G), 1)
            unit = torch.nn.functional.normalize(G.flatten(1), dim=1)        # cosine's index

            def cosine():
                return 1.0 - torch.nn.functional.normalize(queries.flatten(1), dim=1) @ unit.T

            def full():
                return cross_distance(*drm.embed(queries), P, w)

            def shortlist_rerank():
                Pq, wq = drm.embed(queries)
                idx = cosine().topk(args.shortlist, dim=1, largest=False).indices                      # (Q, S)
                q, s = queries.shape[0], idx.shape[1]
                d = pair_distance(Pq.repeat_interleave(s, 0), wq.repeat_interleave(s, 0),
                                  P[idx.flatten()], w[idx.flatten()]).view(q, s)
                out = torch.full((q, size), float("inf"))
                return out.scatter(1, idx, d)

            t_cos, _ = timed(cosine)
            t_full, d_full = timed(full)
            t_two, d_two = timed(shortlist_rerank)
            recall = recall_at_k(d_two.numpy(), d_full.numpy(), args.k).mean()
            for method, t in (("cosine", t_cos), ("drm", t_full), (f"cosine top-{args.shortlist} → drm", t_two)):
                rows.append({"gallery": size, "method": method, "queries_per_s": args.queries / t,
                             "ms_per_query": 1e3 * t / args.queries,
                             "recall@k_of_full_drm": recall if "→" in method else (1.0 if method == "drm" else np.nan),
                             "index_s": index_s if method != "cosine" else np.nan})
            print(f"gallery {size}: cosine {args.queries / t_cos:.0f} q/s, DRM {args.queries / t_full:.0f} q/s, "
                  f"two-stage {args.queries / t_two:.0f} q/s (recall@{args.k} of full DRM {recall:.3f})", flush=True)
    df = pd.DataFrame(rows)
    header = (f"Retrieval search cost, {args.queries} queries, best of 3, on {machine('cpu')}. "
              f"k = {args.k}.\n\n")
    write_stamped(OUT, "retrieval_speed", df, header + df.to_markdown(index=False, floatfmt=".4g"), float_format="%.4g")
    print(df.to_markdown(index=False, floatfmt=".4g"))


if __name__ == "__main__":
    main()
