# The tractability diagnostic: one job per probe, then the tables and figures over all probes.
DIAGNOSE = snakemake_rule("diagnose", config)
DIAGNOSE_TABLES = snakemake_rule("diagnose-tables", config)

rule diagnose:
    input:
        **DIAGNOSE.input,
    output:
        **DIAGNOSE.output,
    params:
        **DIAGNOSE.params,
    log:
        DIAGNOSE.log,
    benchmark:
        DIAGNOSE.benchmark
    threads: DIAGNOSE.threads
    resources:
        **DIAGNOSE.resources,
    conda:
        "../envs/environment.yaml"
    shell:
        DIAGNOSE.shell

rule diagnose_tables:
    input:
        **DIAGNOSE_TABLES.input,
    output:
        **DIAGNOSE_TABLES.output,
    params:
        **DIAGNOSE_TABLES.params,
    log:
        DIAGNOSE_TABLES.log,
    benchmark:
        DIAGNOSE_TABLES.benchmark
    threads: DIAGNOSE_TABLES.threads
    resources:
        **DIAGNOSE_TABLES.resources,
    conda:
        "../envs/environment.yaml"
    shell:
        DIAGNOSE_TABLES.shell
