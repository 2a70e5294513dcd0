# Data: render the synthetic world (or index the real data sets).
FETCH = snakemake_rule("fetch", config)

rule fetch:
    input:
        **FETCH.input,
    output:
        **FETCH.output,
    params:
        **FETCH.params,
    log:
        FETCH.log,
    benchmark:
        FETCH.benchmark
    threads: FETCH.threads
    resources:
        **FETCH.resources,
    conda:
        "../envs/environment.yaml"
    shell:
        FETCH.shell
