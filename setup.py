"""Maps the top-level collectors/ and dashboard/ folders into the gpuprobe namespace.

They stay top-level folders in the repository (the project's layout), but the installed
distribution must not claim the generic import names `collectors` and `dashboard`, so they
install as `gpuprobe.collectors` and `gpuprobe.dashboard`. gpuprobe/data (no Python, only the bundled
traces) is listed as a package of its own so that setuptools ships its files (package-data in
pyproject.toml). Everything else is in pyproject.toml.
"""
from setuptools import find_packages, setup

FOLDERS = {"gpuprobe": "gpuprobe", "gpuprobe.collectors": "collectors", "gpuprobe.dashboard": "dashboard"}


def _packages() -> list[str]:
    found = ["gpuprobe.data"]
    for name, folder in FOLDERS.items():
        found.append(name)
        found += [f"{name}.{sub}" for sub in find_packages(folder)]
    return found


setup(packages=_packages(), package_dir=FOLDERS)
