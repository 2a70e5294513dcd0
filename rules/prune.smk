# Using the metric: token merging (CLS models) and hard prune + LLF (dense models) against ToMe, EViT and
# random, their cost, and the pruning tables and figures.
PRUNE_CLS = snakemake_rule("prune-cls", config)
PRUNE_DENSE = snakemake_rule("prune-dense", config)
PRUNE_SPEED = snakemake_rule("prune-speed", config)
PRUNE_TABLES = snakemake_rule("prune-tables", config)

rule prune_cls:
    input:
        **PRUNE_CLS.input,
    output:
        **PRUNE_CLS.output,
    params:
        **PRUNE_CLS.params,
    log:
        PRUNE_CLS.log,
    benchmark:
        PRUNE_CLS.benchmark
    threads: PRUNE_CLS.threads
    resources:
        **PRUNE_CLS.resources,
    conda:
        "../envs/environment.yaml"
    shell:
        PRUNE_CLS.shell

rule prune_dense:
    input:
        **PRUNE_DENSE.input,
    output:
        **PRUNE_DENSE.output,
    params:
        **PRUNE_DENSE.params,
    log:
        PRUNE_DENSE.log,
    benchmark:
        PRUNE_DENSE.benchmark
    threads: PRUNE_DENSE.threads
    resources:
        **PRUNE_DENSE.resources,
    conda:
        "../envs/environment.yaml"
    shell:
        PRUNE_DENSE.shell

rule prune_speed:
    input:
        **PRUNE_SPEED.input,
    output:
        **PRUNE_SPEED.output,
    params:
        **PRUNE_SPEED.params,
    log:
        PRUNE_SPEED.log,
    benchmark:
        PRUNE_SPEED.benchmark
    threads: PRUNE_SPEED.threads
    resources:
        **PRUNE_SPEED.resources,
    conda:
        "../envs/environment.yaml"
    shell:
        PRUNE_SPEED.shell

rule prune_tables:
    input:
        **PRUNE_TABLES.input,
    output:
        **PRUNE_TABLES.output,
    params:
        **PRUNE_TABLES.params,
    log:
        PRUNE_TABLES.log,
    benchmark:
        PRUNE_TABLES.benchmark
    threads: PRUNE_TABLES.threads
    resources:
        **PRUNE_TABLES.resources,
    conda:
        "../envs/environment.yaml"
    shell:
        PRUNE_TABLES.shell
