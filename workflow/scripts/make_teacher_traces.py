import shutil

from batched_reasoning.distill import make_teacher_traces
from batched_reasoning.hub import download_dataset_file
from batched_reasoning.io import atomic_path, log_to, read_jsonl, write_json

with log_to(snakemake.log[0]):
    teacher = snakemake.params.teacher
    if teacher["source"] == "arith-traces":
        write_json(make_teacher_traces(read_jsonl(snakemake.input.train)), snakemake.output[0])
    elif teacher["source"] == "hub":
        download_dataset_file(teacher["repo_id"], teacher["filename"], snakemake.output[0],
                              teacher["revision"])
    else:  # local: copied as is; malformed rows are counted when the distill stage reads it
        with atomic_path(snakemake.output[0]) as tmp:
            shutil.copyfile(snakemake.input.source, tmp)
