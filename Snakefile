# batched-reasoning: throughput experiments on reasoning LLMs (the book's Appendix E, measured).
from snakemake.utils import min_version

min_version("9.20")


configfile: "config.yaml"


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/models.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/tokenize.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/self_consistency.smk"
include: "workflow/rules/grpo.smk"
include: "workflow/rules/distill.smk"
include: "workflow/rules/autotune.smk"
include: "workflow/rules/curve.smk"
include: "workflow/rules/appendix_e.smk"
include: "workflow/rules/tables.smk"


rule all:
    default_target: True
    input:
        rules.appendix_e_table.output,
        rules.evaluate_table.output,
        rules.workload_table.output,
        rules.self_consistency_table.output,
        rules.self_consistency_curve_table.output,
        rules.grpo_table.output,
        rules.distill_table.output,
        rules.story_table.output,
        rules.autotune_table.output if PLAN.probes() else [],
