# One Snakemake rule per stage of the registry (src/taskgeom/pipeline/registry.py).


def stage_rule(name):
    """The rule of one registry stage, named after it (``zoo-table`` -> ``zoo_table``). A
    function per rule, so each rule's shell command and params close over their own stage."""
    r = snakemake_rule(name, config)

    rule:
        name:
            name.replace("-", "_")
        input:
            **r.input,
        output:
            **r.output,
        params:
            **r.params,
        log:
            r.log,
        benchmark:
            r.benchmark
        threads: r.threads
        resources:
            **r.resources,
        conda:
            f"{workflow.basedir}/envs/environment.yaml"
        shell:
            r.shell


def stage_rules(*names):
    for name in names:
        stage_rule(name)
