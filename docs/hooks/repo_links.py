"""MkDocs hook: links from the docs to files of the repository outside docs/.

The pages link to the experiment READMEs, their scorecards, benchmarks/RESULTS.md and
scripts by repository-relative paths (``../experiments/padpfl/README.md``), which work
when the Markdown is read in the repository. MkDocs would report them as not found, so
this hook checks each one itself: a target that does not exist in the repository is a
warning (an error under ``--strict``); one that exists is rewritten to
``<repo_url>/blob/main/<path>`` when ``repo_url`` is set in mkdocs.yml, else to the
path relative to the built page (written as an HTML anchor, which MkDocs leaves alone),
which resolves when the site is built inside the repository (``site/``, the default) and
opened from disk.
"""

import logging
import os
import posixpath
import re

log = logging.getLogger("mkdocs.hooks.repo_links")

# [text](target) and [text](target "title"); images too. Not inside code spans/blocks.
_LINK = re.compile(r"(!?\[[^\]]*\]\()([^)\s]+)((?:\s+\"[^\"]*\")?\))")
_FENCE = re.compile(r"^(```|~~~)")


def _rewrite(markdown, page, config):
  docs_dir = os.path.abspath(config["docs_dir"])
  root = os.path.dirname(os.path.abspath(config["config_file_path"]))
  page_dir = os.path.dirname(os.path.join(docs_dir, page.file.src_path))
  repo_url = (config.get("repo_url") or "").rstrip("/")

  def fix(match):
    target = match.group(2)
    if "://" in target or target.startswith(("#", "/", "mailto:")):
      return match.group(0)
    path, _, anchor = target.partition("#")
    resolved = os.path.normpath(os.path.join(page_dir, path))
    if resolved == docs_dir or resolved.startswith(docs_dir + os.sep):
      return match.group(0)  # inside docs/: MkDocs validates it
    if not resolved.startswith(root + os.sep):
      log.warning("%s: link %r leaves the repository", page.file.src_path, target)
      return match.group(0)
    if not os.path.exists(resolved):
      log.warning("%s: link %r: no such file in the repository", page.file.src_path, target)
      return match.group(0)
    rel = os.path.relpath(resolved, root).replace(os.sep, "/")
    if repo_url:
      kind = "tree" if os.path.isdir(resolved) else "blob"
      url = f"{repo_url}/{kind}/main/{rel}"
    else:
      # The page is served from site/<page url>; site/ lies in the repository root.
      page_url = page.url if page.url.endswith("/") or not page.url else \
          posixpath.dirname(page.url) + "/"
      depth = 1 + page_url.count("/") if page_url else 1
      url = "../" * depth + rel
    if anchor:
      url += "#" + anchor
    if repo_url or match.group(1).startswith("!"):
      return match.group(1) + url + match.group(3)
    return f'<a href="{url}">' + match.group(1)[1:-2] + "</a>"

  out, fenced = [], False
  for line in markdown.split("\n"):
    if _FENCE.match(line.lstrip()):
      fenced = not fenced
    out.append(line if fenced else _LINK.sub(fix, line))
  return "\n".join(out)


def on_page_markdown(markdown, page, config, files):  # pylint: disable=unused-argument
  return _rewrite(markdown, page, config)
