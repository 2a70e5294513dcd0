# Learning the metric: the VAE bottleneck, the HDF5 target cache, then the SPN and the importance heads,
# and their tables and figures.
VAE = snakemake_rule("vae", config)
TARGETS = snakemake_rule("targets", config)
SPN = snakemake_rule("spn", config)
HEAD = snakemake_rule("head", config)
METRIC_TABLES = snakemake_rule("metric-tables", config)

rule vae:
    input:
        **VAE.input,
    output:
        **VAE.output,
    params:
        **VAE.params,
    log:
        VAE.log,
    benchmark:
        VAE.benchmark
    threads: VAE.threads
    resources:
        **VAE.resources,
    conda:
        "../envs/environment.yaml"
    shell:
        VAE.shell

rule targets:
    input:
        **TARGETS.input,
    output:
        **TARGETS.output,
    params:
        **TARGETS.params,
    log:
        TARGETS.log,
    benchmark:
        TARGETS.benchmark
    threads: TARGETS.threads
    resources:
        **TARGETS.resources,
    conda:
        "../envs/environment.yaml"
    shell:
        TARGETS.shell

rule spn:
    input:
        **SPN.input,
    output:
        **SPN.output,
    params:
        **SPN.params,
    log:
        SPN.log,
    benchmark:
        SPN.benchmark
    threads: SPN.threads
    resources:
        **SPN.resources,
    conda:
        "../envs/environment.yaml"
    shell:
        SPN.shell

rule head:
    input:
        **HEAD.input,
    output:
        **HEAD.output,
    params:
        **HEAD.params,
    log:
        HEAD.log,
    benchmark:
        HEAD.benchmark
    threads: HEAD.threads
    resources:
        **HEAD.resources,
    conda:
        "../envs/environment.yaml"
    shell:
        HEAD.shell

rule metric_tables:
    input:
        **METRIC_TABLES.input,
    output:
        **METRIC_TABLES.output,
    params:
        **METRIC_TABLES.params,
    log:
        METRIC_TABLES.log,
    benchmark:
        METRIC_TABLES.benchmark
    threads: METRIC_TABLES.threads
    resources:
        **METRIC_TABLES.resources,
    conda:
        "../envs/environment.yaml"
    shell:
        METRIC_TABLES.shell
