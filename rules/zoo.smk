# The tiny model zoo: train each model, then tabulate their held-out metrics.
ZOO = snakemake_rule("zoo", config)
ZOO_TABLE = snakemake_rule("zoo-table", config)

rule zoo:
    input:
        **ZOO.input,
    output:
        **ZOO.output,
    params:
        **ZOO.params,
    log:
        ZOO.log,
    benchmark:
        ZOO.benchmark
    threads: ZOO.threads
    resources:
        **ZOO.resources,
    conda:
        "../envs/environment.yaml"
    shell:
        ZOO.shell

rule zoo_table:
    input:
        **ZOO_TABLE.input,
    output:
        **ZOO_TABLE.output,
    params:
        **ZOO_TABLE.params,
    log:
        ZOO_TABLE.log,
    benchmark:
        ZOO_TABLE.benchmark
    threads: ZOO_TABLE.threads
    resources:
        **ZOO_TABLE.resources,
    conda:
        "../envs/environment.yaml"
    shell:
        ZOO_TABLE.shell
