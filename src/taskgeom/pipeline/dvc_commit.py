"""``python -m taskgeom.pipeline.dvc_commit [--recorded] [TARGET ...]``: ``dvc commit --force
[TARGET ...]`` with each DVC file read and written once, whatever the number of targets, and
with ``--recorded`` only the stages whose job record describes their files (``job_record``).

``dvc commit`` commits its targets one at a time (``dvc.commands.commit``): each target takes the
repository lock, collects its stages and rewrites the whole dvc.lock, which DVC parses for the
update with ruamel's round-trip loader (pure Python, several times slower than its safe
loader). With a lock file that lists every stage's dependencies, parameters and outputs, that
is most of the Snakemake-to-DVC sync after a run of a few jobs (``benchmarks/dvc_commit_cost.py``).
Here every target's stages are collected under one lock and committed as DVC's ``Repo.commit``
commits the stages of one target: saved (their hashes computed), their outputs cached, and then
each DVC file's stages dumped in one write. Without targets, every stage. The writes are atomic
(``dvc_atomic``). The repository lock is waited for, as with ``dvc --wait-for-lock``.
"""

from __future__ import annotations

import sys

from taskgeom.pipeline.dvc_atomic import patch_dvc

RECORDED = "--recorded"  # commit only the stages a job record describes


def commit(targets: list[str], recorded: bool = False) -> list[str]:
    """Commit the stages of ``targets`` (every stage when empty; names resolved as the ``dvc``
    command resolves them, from the current directory) as ``dvc commit --force``, each with the
    values its job read (``job_record``); with ``recorded``, only the stages whose job record
    describes their files (``job_record.record_of``). Return the addresses committed, in order."""
    patch_dvc()
    from dvc.repo import Repo, locked

    from taskgeom.pipeline.job_record import record_of

    @locked
    def commit_all(repo: Repo) -> list[str]:
        infos, seen = [], set()
        for target in targets or [None]:
            for info in repo.stage.collect_granular(target):
                if info.stage.addressing not in seen:
                    seen.add(info.stage.addressing)
                    if not recorded or record_of(info.stage) is not None:
                        infos.append(info)
        by_file: dict[str, tuple[object, list]] = {}
        for info in infos:
            info.stage.save()
            info.stage.commit(filter_info=info.filter_info, relink=True)
            by_file.setdefault(info.stage.dvcfile.relpath, (info.stage.dvcfile, []))[1].append(info.stage)
        for dvcfile, stages in by_file.values():
            dvcfile.dump_stages(stages, update_pipeline=False)
        return [info.stage.addressing for info in infos]

    with Repo(_wait_for_lock=True) as repo:
        return commit_all(repo)


def main(argv: list[str]) -> int:
    """``[--recorded] [TARGET ...]``: ``commit``, printing each address committed on a line."""
    recorded = argv[:1] == [RECORDED]
    for address in commit(argv[1:] if recorded else argv, recorded):
        print(address)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
