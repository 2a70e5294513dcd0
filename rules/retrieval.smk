# Using the metric for search: the Decoder Retrieval Metric against L2 and cosine, and its tables and figures.
RETRIEVAL = snakemake_rule("retrieval", config)
RETRIEVAL_TABLES = snakemake_rule("retrieval-tables", config)

rule retrieval:
    input:
        **RETRIEVAL.input,
    output:
        **RETRIEVAL.output,
    params:
        **RETRIEVAL.params,
    log:
        RETRIEVAL.log,
    benchmark:
        RETRIEVAL.benchmark
    threads: RETRIEVAL.threads
    resources:
        **RETRIEVAL.resources,
    conda:
        "../envs/environment.yaml"
    shell:
        RETRIEVAL.shell

rule retrieval_tables:
    input:
        **RETRIEVAL_TABLES.input,
    output:
        **RETRIEVAL_TABLES.output,
    params:
        **RETRIEVAL_TABLES.params,
    log:
        RETRIEVAL_TABLES.log,
    benchmark:
        RETRIEVAL_TABLES.benchmark
    threads: RETRIEVAL_TABLES.threads
    resources:
        **RETRIEVAL_TABLES.resources,
    conda:
        "../envs/environment.yaml"
    shell:
        RETRIEVAL_TABLES.shell
