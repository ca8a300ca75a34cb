"""The workflow's conventions outside its rules: the Snakemake workflow catalog's settings file and
the pinned conda environment that `--sdm conda` builds for the jobs (docs/reproducibility.md).
`snakemake --lint` itself is tests/test_workflow.py::test_lint_and_format."""

import re
import tomllib

import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from workflow_helpers import REPO

ENV_FILE = REPO / "workflow/envs/batched-reasoning.yaml"
CATALOG = REPO / ".snakemake-workflow-catalog.yml"
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def env_specs() -> tuple[dict[str, str], list[str]]:
    """The environment's conda packages (name → version spec) and its pip entries."""
    env = yaml.safe_load(ENV_FILE.read_text())
    conda, pip = {}, []
    for entry in env["dependencies"]:
        if isinstance(entry, dict):
            pip += entry["pip"]
        else:
            name, spec = re.fullmatch(r"([A-Za-z0-9_.+-]+)\s*(.*)", entry).groups()
            conda[name] = spec
    return conda, pip


def pins(requirements: list[str]) -> dict[str, str]:
    """name → version of each `==` requirement."""
    found = {}
    for line in requirements:
        requirement = Requirement(line)
        exact = [s.version for s in requirement.specifier if s.operator == "=="]
        if exact:
            found[requirement.name.lower()] = exact[0]
    return found


def test_the_catalog_settings_say_how_the_workflow_runs():
    usage = yaml.safe_load(CATALOG.read_text())["usage"]
    assert set(usage) == {"mandatory-flags", "software-stack-deployment"}
    # no flag beyond --cores, which the catalog's own commands give
    assert usage["mandatory-flags"]["desc"] and usage["mandatory-flags"]["flags"] == []
    deployment = usage["software-stack-deployment"]
    assert set(deployment) <= {"conda", "apptainer", "apptainer+conda", "report"}
    assert deployment["conda"] is True and ENV_FILE.exists()
    assert deployment["apptainer"] is False and deployment["apptainer+conda"] is False
    assert deployment["report"] is True  # the Snakefile's report:, `snakemake --report` in CI
    assert re.search(r"^report:", (REPO / "Snakefile").read_text(), re.M)


def test_the_conda_environment_pins_what_pyproject_pins():
    conda, pip = env_specs()
    assert set(conda) == {"python", "pip"}
    python = conda["python"].lstrip("=")
    assert SpecifierSet(PYPROJECT["requires-python"]).contains(f"{python}.0")
    options = [line for line in pip if line.startswith("-")]
    requirements = [line for line in pip if not line.startswith("-")]
    # PyTorch's CPU build, from its index beside PyPI, at the version the README installs
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in options
    assert pins(requirements)["torch"] == "2.13.0"
    readme = (REPO / "README.md").read_text()
    assert set(re.findall(r"pip install torch==(\d[\w.]*\w)", readme)) == {"2.13.0"}
    runtime = {r.name.lower(): r for r in map(Requirement, PYPROJECT["dependencies"])}
    assert runtime["torch"].specifier.contains("2.13.0")
    # The package itself, editable, brings pyproject.toml's runtime pins (snakemake==9.27.1); the
    # environment repeats none at another version and adds no package only an extra asks for
    # (transformers==5.24.0 is `dev`'s: the tests' reference, not a job's).
    for name, version in pins(requirements).items():
        if name in runtime:
            assert runtime[name].specifier.contains(version), f"{name}=={version}: {runtime[name]}"
    for extra, lines in PYPROJECT["optional-dependencies"].items():
        for name in pins(lines):
            assert name not in pins(requirements), f"{name} ({extra} only) in {ENV_FILE}"


def test_the_environment_installs_this_repository():
    """`-e ../..` is the repository root from the file's folder (`conda env create -f`) and from
    the copy Snakemake hands conda in the default `--conda-prefix`, `.snakemake/conda/` of the
    working directory: conda runs pip in the given file's folder."""
    _, pip = env_specs()
    (editable,) = [line.split(None, 1)[1] for line in pip if line.startswith("-e ")]
    for folder in (ENV_FILE.parent, REPO / ".snakemake/conda"):
        assert (folder / editable).resolve() == REPO
    assert (REPO / "pyproject.toml").exists()


def test_no_profile_deploys_software_by_default():
    """The default run uses the README's virtual environment; conda is the user's choice."""
    for profile in (REPO / "profiles").glob("*/*.yaml"):
        settings = yaml.safe_load(profile.read_text()) or {}
        chosen = {"sdm", "software-deployment-method", "use-conda", "use-singularity",
                  "use-apptainer"} & set(settings)
        assert not chosen, f"{profile.relative_to(REPO)} sets {chosen}"
