"""The one way the harness makes HTML: jinja templates with autoescaping always on.

Every page (run and campaign reports, timeline.html, the linearizability picture) is rendered
here, so every string a history, a file name or a config puts on a page is escaped for where it
lands: `{{ x }}` as text, `{{ x | tojson }}` as data for the page's script (jinja escapes <, >,
& and ' in it, so no value can close the <script> block). Nothing is substituted into a page
by string replacement: a placeholder inside one value would be replaced by another value,
unescaped, which is how a history's file name once ran a script."""

from __future__ import annotations

import jinja2


def environment(package: str, folder: str = "templates") -> jinja2.Environment:
    """Templates of `package`/`folder`, escaped whatever their names end with."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader(package, folder),
        autoescape=True,  # not select_autoescape: a template's name never turns it off
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    # tojson: in the data's own order, anything JSON has no type for as its str.
    env.policies["json.dumps_kwargs"] = {"sort_keys": False, "default": str}
    return env
