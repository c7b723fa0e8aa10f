// Strings in the user's language. English text is the key; zh.js maps it to Chinese. A missing
// translation shows the English.
import { zh } from "./zh.js";

const KEY = "jobmesh.lang";
const dicts = { en: {}, zh };

// LANGS lists the languages offered by the language switch.
export const LANGS = [["en", "English"], ["zh", "中文"]];

let current = localStorage.getItem(KEY) || ((navigator.language || "").toLowerCase().startsWith("zh") ? "zh" : "en");

// lang is the current language code.
export const lang = () => current;

// setLang switches language (kept in this browser).
export function setLang(l) {
  current = dicts[l] ? l : "en";
  localStorage.setItem(KEY, current);
  document.documentElement.lang = current === "zh" ? "zh-CN" : "en";
}

// t translates key, filling {name} placeholders from vars.
export function t(key, vars) {
  let s = dicts[current][key] ?? key;
  if (vars) s = s.replace(/\{(\w+)\}/g, (m, k) => (k in vars ? String(vars[k]) : m));
  return s;
}

setLang(current);
