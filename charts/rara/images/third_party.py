"""Print the third-party requirements of some pyproject.toml files, one per line.

    python3 third_party.py pyproject.toml[EXTRA,...] examples/rag/pyproject.toml ...

The images install these in a layer of their own, before rara's code, so that a change to
rara rebuilds and moves only the small layer of its own packages (installed with --no-deps)
while the dependencies' layer, gigabytes in the executor, stays cached in the engine, in the
registry and on the nodes. Requirements naming one of the given projects (rara-rag needs
rara==0.1.0) are first-party: their extras are followed, the pin itself is left out.
Standard library only: it runs in the build stage before anything is installed.
"""

import re
import sys
import tomllib

_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[([^\]]*)\])?")


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _split(argument: str) -> tuple[str, set[str]]:
    path, _, extras = argument.partition("[")
    return path, {e.strip() for e in extras.rstrip("]").split(",") if e.strip()}


def third_party(arguments: list[str]) -> list[str]:
    projects: dict[str, dict] = {}  # type: ignore[type-arg]
    wanted: dict[str, set[str]] = {}
    for argument in arguments:
        path, extras = _split(argument)
        with open(path, "rb") as file:
            project = tomllib.load(file)["project"]
        name = _canonical(project["name"])
        projects[name] = project
        wanted[name] = extras
    requirements: list[str] = []
    done: set[tuple[str, str]] = set()
    todo = [(name, extra) for name, extras in wanted.items() for extra in ("", *extras)]
    while todo:
        name, extra = todo.pop(0)
        if (name, extra) in done:
            continue
        done.add((name, extra))
        project = projects[name]
        listed = (
            project.get("dependencies", [])
            if not extra
            else (project.get("optional-dependencies", {}).get(extra))
        )
        if listed is None:
            raise SystemExit(f"{name} has no extra named {extra!r}")
        for requirement in listed:
            match = _NAME.match(requirement)
            if match is None:
                raise SystemExit(f"{name}: cannot read the requirement {requirement!r}")
            other = _canonical(match.group(1))
            if other in projects:  # first-party: its own extras, never its pin
                todo += [(other, "")] + [
                    (other, e.strip()) for e in (match.group(2) or "").split(",") if e.strip()
                ]
            elif requirement not in requirements:
                requirements.append(requirement)
    return requirements


if __name__ == "__main__":
    print("\n".join(third_party(sys.argv[1:])))
