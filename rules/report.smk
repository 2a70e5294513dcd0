# The report: results/REPORT.md from every table.
REPORT = snakemake_rule("report", config)

rule report:
    input:
        **REPORT.input,
    output:
        **REPORT.output,
    params:
        **REPORT.params,
    log:
        REPORT.log,
    benchmark:
        REPORT.benchmark
    threads: REPORT.threads
    resources:
        **REPORT.resources,
    conda:
        "../envs/environment.yaml"
    shell:
        REPORT.shell
