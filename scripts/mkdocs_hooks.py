"""mkdocs hooks for cohort's documentation site (mkdocs.yml names this file).

README.md is the site's front page: it is added as index.md, its links into docs/ made relative to the
site. A link that leaves docs/ (to a source file, an example, a benchmark) cannot be served by the site:
it becomes its text and the repository path, checked to exist, so `mkdocs build --strict` still fails
on a link to a file that is not there."""
import logging
import os
import re

from mkdocs.structure.files import File

log = logging.getLogger("mkdocs.plugins.cohort")
LINK = re.compile(r"(?<!!)\[([^\]]+)\]\(([^)\s]+)\)")


def _root(config):
    return os.path.dirname(os.path.abspath(config["config_file_path"]))


def on_files(files, config):
    with open(os.path.join(_root(config), "README.md"), encoding="utf-8") as f:
        readme = f.read()
    # README links docs/x.md; on the site the page is docs/index.md, beside x.md, one level below the
    # top, so its other relative links go up one.
    readme = re.sub(r"(?<!!)(\[[^\]]+\]\()(?![a-z]+:|#|docs/)", r"\1../", readme)
    readme = readme.replace("](docs/", "](")
    files.append(File.generated(config, "index.md", content=readme))
    return files


def on_page_markdown(markdown, page, config, files):
    root = _root(config)
    docs_dir = os.path.abspath(config["docs_dir"])
    page_dir = os.path.dirname(os.path.join(docs_dir, page.file.src_uri))

    def rewrite(match):
        text, target = match.group(1), match.group(2)
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            return match.group(0)
        path = os.path.normpath(os.path.join(page_dir, target.split("#")[0]))
        if path.startswith(docs_dir + os.sep) or path == docs_dir:
            return match.group(0)
        rel = os.path.relpath(path, root)
        if rel.startswith("..") or not os.path.exists(path):
            log.warning("%s: link to '%s', which is not in the repository", page.file.src_uri, target)
            return match.group(0)
        shown = text.strip("`").rstrip("/")
        if rel == shown or rel.startswith(shown + "/"):
            return f"`{rel}`"  # the text is the path, or its folder: the path alone says it
        return f"{text} (`{rel}`)"

    return LINK.sub(rewrite, markdown)
