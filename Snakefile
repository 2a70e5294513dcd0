# taskgeom pipeline. `snakemake -c2` regenerates every result of params.yaml's profile.
# The rules are drawn from the stage registry in src/taskgeom/pipeline/registry.py, the same
# table dvc.yaml is generated from, so both front ends run the same commands: `stage_rules`
# (rules/common.smk) makes one rule per stage, and each other file in rules/ calls it for one
# area of the DAG.
import sys
from pathlib import Path

from snakemake.utils import min_version

sys.path.insert(0, f"{workflow.basedir}/src")  # this checkout's registry, whatever is installed

from taskgeom.pipeline import config as taskgeom_config
from taskgeom.pipeline.code_records import refresh as refresh_code
from taskgeom.pipeline.dag import snakemake_rule
from taskgeom.pipeline.external import loops_refusal
from taskgeom.pipeline.identity import refresh
from taskgeom.pipeline.registry import final_outputs
from taskgeom.pipeline.schedule import priorities
from taskgeom.pipeline.sync import commit_to_dvc, follow_dvc, up_to_date_commands

min_version("9.0")


# Before Snakemake reads anything, in one line each: a params.yaml that `taskgeom params check` cannot
# read (config.read: not UTF-8, not YAML, or YAML aliases repeating more nodes than the limit), and
# a symbolic link loop where the stages write (external.loops_refusal; the environment's `dvc` too)
try:
    taskgeom_config.read("params.yaml")
except taskgeom_config.ParamsError as err:
    sys.exit(f"taskgeom: error: {err}")
if loops := loops_refusal():
    sys.exit(loops)


configfile: "params.yaml"


# `snakemake --report report.html`: this description, then the results rules/common.smk flags (REPORT_ITEMS)
report: "docs/report/workflow.rst"


# the schema (src/taskgeom/params.schema.yaml) and the cross-checks, one line per problem naming its
# key, as `taskgeom params check` says them (not jsonschema's dump of the schema)
try:
    taskgeom_config.validate(config, "params.yaml")
except taskgeom_config.ParamsError as err:
    sys.exit(f"taskgeom: error: {err}")
# the content of the data sets and checkpoints the profile reads from outside (pipeline/identity.py)
IDENTITY = refresh(config)
refresh_code()  # each stage's code dependency, data/code/<stage>.txt (pipeline/code_records.py)
if workflow.is_main_process:  # not in a job that a cluster runs with its own `snakemake`
    follow_dvc(config)  # after `dvc repro`, `dvc checkout` or `dvc pull`: take DVC's state (pipeline/sync.py)


wildcard_constraints:
    model="[a-z0-9][a-z0-9-]*",
    probe="[a-z0-9][a-z0-9-]*",
    head="[a-z0-9][a-z0-9-]*",
    vae="[a-z0-9][a-z0-9-]*",
    cls="[a-z0-9][a-z0-9-]*",
    dense="[a-z0-9][a-z0-9-]*",
    retrieval="[a-z0-9][a-z0-9-]*",
    source="[a-z0-9][a-z0-9_-]*",


rule all:
    default_target: True
    input:
        final_outputs(config),


include: "rules/common.smk"
include: "rules/data.smk"
include: "rules/zoo.smk"
include: "rules/diagnose.smk"
include: "rules/learn.smk"
include: "rules/prune.smk"
include: "rules/retrieval.smk"
include: "rules/report.smk"


# Record in dvc.lock what this run brought up to date, so `dvc status` agrees (pipeline/sync.py):
# after a failed run too, the jobs that succeeded, which the next read of this file would otherwise
# take for out of date, as dvc.lock has them.
onsuccess:
    commit_to_dvc(up_to_date_commands(workflow.dag), params=config)


onerror:
    commit_to_dvc(up_to_date_commands(workflow.dag), params=config)
