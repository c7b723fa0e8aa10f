// A small syntax highlighter and the code editor built on it: a transparent <textarea> over a
// highlighted <pre>, so typing, selection, undo and the clipboard stay the browser's own.
import { h } from "./dom.js";

const KEYWORDS = {
  shell: "if then else elif fi for while until do done case esac function in return exit local export readonly set unset shift source trap break continue declare echo printf read cd test",
  python: "False None True and as assert async await break class continue def del elif else except finally for from global if import in is lambda nonlocal not or pass raise return try while with yield print self",
  js: "async await break case catch class const continue debugger default delete do else export extends finally for function if import in instanceof let new of return super switch this throw try typeof var void while with yield null undefined true false require console process",
  php: "abstract and array as break case catch class clone const continue default do echo else elseif empty extends final finally fn for foreach function global if implements include instanceof interface isset list match namespace new or print private protected public require require_once return static switch throw trait try unset use var while xor yield true false null",
  powershell: "begin break catch class continue do else elseif end exit filter finally for foreach function if in param process return switch throw trap try until while Write-Host Write-Output Write-Error",
  groovy: "def class import package return if else for while try catch finally throw new static final void int long boolean true false null println String",
};

const STR = `"(?:\\\\.|[^"\\\\])*"|'(?:\\\\.|[^'\\\\])*'`;
const NUM = `\\b\\d+(?:\\.\\d+)?\\b`;
const kw = (lang) => `(?<![\\w$-])(?:${KEYWORDS[lang].split(" ").map((w) => w.replace(/[-]/g, "\\-")).join("|")})(?![\\w-])`;

// RULES lists, per language, [css class, regexp source] in priority order. Sources use only
// non-capturing groups.
const RULES = {
  shell: [["com", "#.*"], ["str", STR], ["var", "\\$\\{[^}\\n]*\\}|\\$[A-Za-z_@#?*0-9][A-Za-z0-9_]*"], ["kw", kw("shell")], ["num", NUM]],
  python: [["str", `"""[\\s\\S]*?"""|'''[\\s\\S]*?'''`], ["com", "#.*"], ["str", STR], ["kw", kw("python")], ["num", NUM], ["fn", "\\b[A-Za-z_]\\w*(?=\\()"]],
  js: [["com", "//.*|/\\*[\\s\\S]*?\\*/"], ["str", STR + "|`(?:\\\\.|[^`\\\\])*`"], ["kw", kw("js")], ["num", NUM], ["fn", "\\b[A-Za-z_$][\\w$]*(?=\\()"]],
  php: [["com", "//.*|#.*|/\\*[\\s\\S]*?\\*/"], ["str", STR], ["var", "\\$[A-Za-z_]\\w*"], ["kw", kw("php")], ["num", NUM], ["tag", "<\\?php|\\?>"]],
  powershell: [["com", "<#[\\s\\S]*?#>|#.*"], ["str", STR], ["var", "\\$[A-Za-z_][\\w:]*|\\$\\("], ["kw", kw("powershell")], ["num", NUM]],
  groovy: [["com", "//.*|/\\*[\\s\\S]*?\\*/"], ["str", STR], ["kw", kw("groovy")], ["num", NUM]],
};

const compiled = {};

// langOf maps a GLUE type to the highlighter's language.
export function langOf(glueType) {
  return ({
    GLUE_TYPE_GLUE_SHELL: "shell", GLUE_TYPE_GLUE_PYTHON: "python", GLUE_TYPE_GLUE_PYTHON2: "python",
    GLUE_TYPE_GLUE_NODEJS: "js", GLUE_TYPE_GLUE_PHP: "php", GLUE_TYPE_GLUE_POWERSHELL: "powershell",
    GLUE_TYPE_GLUE_GROOVY: "groovy",
  })[glueType] || "shell";
}

const esc = (s) => s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");

// highlight returns code as HTML with <span class="tok-…"> around tokens; everything else is
// escaped.
export function highlight(code, lang) {
  const rules = RULES[lang] || RULES.shell;
  if (!compiled[lang]) compiled[lang] = new RegExp(rules.map(([, s]) => `(${s})`).join("|"), "gm" + (lang === "powershell" ? "i" : ""));
  const re = compiled[lang];
  re.lastIndex = 0;
  let out = "";
  let last = 0;
  for (const m of code.matchAll(re)) {
    if (!m[0]) continue;
    const i = m.slice(1).findIndex((g) => g !== undefined);
    out += esc(code.slice(last, m.index)) + `<span class="tok-${rules[i][0]}">${esc(m[0])}</span>`;
    last = m.index + m[0].length;
  }
  return out + esc(code.slice(last));
}

// codeEditor makes an editor for source in lang. It returns {el, textarea, value, setLang}.
export function codeEditor({ value = "", lang = "shell", readOnly = false, name = "glue_source", label = "source" } = {}) {
  const code = h("code");
  const pre = h("pre", { class: "code-hl", "aria-hidden": "true" }, code);
  const gutter = h("div", { class: "code-gutter", "aria-hidden": "true" });
  const ta = h("textarea", {
    class: "code-input", name, spellcheck: "false", autocapitalize: "off", autocomplete: "off",
    wrap: "off", readOnly, "aria-label": label,
  });
  ta.value = value;
  let current = lang;
  const update = () => {
    code.innerHTML = highlight(ta.value, current) + "\n";
    const n = ta.value.split("\n").length;
    if (gutter.childElementCount !== n) gutter.textContent = Array.from({ length: n }, (_, i) => i + 1).join("\n");
    sync();
  };
  const sync = () => { pre.scrollTop = ta.scrollTop; pre.scrollLeft = ta.scrollLeft; gutter.scrollTop = ta.scrollTop; };
  ta.addEventListener("input", update);
  ta.addEventListener("scroll", sync);
  ta.addEventListener("keydown", (e) => {
    if (e.key === "Tab" && !e.shiftKey && !e.ctrlKey && !e.metaKey && !readOnly) {
      e.preventDefault();
      document.execCommand("insertText", false, "  ");
    }
  });
  const el = h("div", { class: "code-editor" + (readOnly ? " readonly" : "") }, gutter, h("div", { class: "code-area" }, pre, ta));
  update();
  return {
    el, textarea: ta,
    get value() { return ta.value; },
    set value(v) { ta.value = v; update(); },
    setLang(l) { current = l; update(); },
  };
}

// TEMPLATES are the sources a new script job starts with, per GLUE type.
export const TEMPLATES = {
  GLUE_TYPE_GLUE_SHELL: '#!/bin/bash\n# $1 is the job parameter; $2 and $3 are the shard index and total.\necho "hello from jobmesh: $1"\nexit 0\n',
  GLUE_TYPE_GLUE_PYTHON: '#!/usr/bin/env python3\nimport sys\n\n# sys.argv[1] is the job parameter.\nprint("hello from jobmesh:", sys.argv[1] if len(sys.argv) > 1 else "")\n',
  GLUE_TYPE_GLUE_PYTHON2: 'import sys\nprint "hello from jobmesh:", sys.argv[1] if len(sys.argv) > 1 else ""\n',
  GLUE_TYPE_GLUE_NODEJS: '// process.argv[2] is the job parameter.\nconsole.log("hello from jobmesh:", process.argv[2] || "");\n',
  GLUE_TYPE_GLUE_PHP: '<?php\n// $argv[1] is the job parameter.\necho "hello from jobmesh: " . ($argv[1] ?? "") . PHP_EOL;\n',
  GLUE_TYPE_GLUE_POWERSHELL: '# $args[0] is the job parameter.\nWrite-Output "hello from jobmesh: $($args[0])"\n',
  GLUE_TYPE_GLUE_GROOVY: 'package com.xxl.job.service.handler;\n\nimport com.xxl.job.core.context.XxlJobHelper;\nimport com.xxl.job.core.handler.IJobHandler;\n\n// Runs on XXL-JOB executors (xxl-job-core); XxlJobHelper.getJobParam() is the job parameter.\npublic class DemoGlueJobHandler extends IJobHandler {\n\n\t@Override\n\tpublic void execute() throws Exception {\n\t\tXxlJobHelper.log("hello from jobmesh: " + XxlJobHelper.getJobParam());\n\t}\n\n}\n',
};
