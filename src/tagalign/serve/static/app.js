// tagalign web page: plain JS, no build step, nothing loaded from outside.
"use strict";
const I18N = {
  en: { tagline: "GND subject suggestions for library records", record: "Record", project: "Project",
    language: "Language", auto: "detect", limit: "Subjects", recordId: "Record id", fetch: "Fetch record",
    title: "Title", abstract: "Abstract", suggest: "Suggest subjects", suggestions: "Suggestions",
    export: "Export accepted (JSON)", accept: "Accept", reject: "Reject", working: "Working…",
    done: n => `${n} suggestions`, accepted: n => `${n} accepted`, sources: "Sources",
    labelMatch: "Label found in the text", neighbours: "Similar records", notFound: "Record not found",
    needTitle: "Please enter a title", saved: "Saved", score: "score",
    learnOff: "Accept/reject is off: this project does not learn from feedback (allow_learn)." },
  de: { tagline: "GND-Schlagwortvorschläge für Katalogdatensätze", record: "Datensatz", project: "Projekt",
    language: "Sprache", auto: "erkennen", limit: "Schlagwörter", recordId: "Datensatz-ID", fetch: "Datensatz laden",
    title: "Titel", abstract: "Zusammenfassung", suggest: "Schlagwörter vorschlagen", suggestions: "Vorschläge",
    export: "Angenommene exportieren (JSON)", accept: "Annehmen", reject: "Ablehnen", working: "Arbeite…",
    done: n => `${n} Vorschläge`, accepted: n => `${n} angenommen`, sources: "Quellen",
    labelMatch: "Bezeichnung im Text gefunden", neighbours: "Ähnliche Datensätze", notFound: "Datensatz nicht gefunden",
    needTitle: "Bitte einen Titel eingeben", saved: "Gespeichert", score: "Wert",
    learnOff: "Annehmen/Ablehnen ist aus: dieses Projekt lernt nicht aus Rückmeldungen (allow_learn)." },
};
let ui = "en";
let current = { recordId: null, suggestions: [], decisions: {} };
let projects = {};  // id → the project as /tagalign/v1/projects lists it
const learnAllowed = () => { const p = projects[$("project").value]; return !p || p.allow_learn !== false; };
const $ = id => document.getElementById(id);
const t = (key, arg) => { const v = I18N[ui][key]; return typeof v === "function" ? v(arg) : v; };

function setUi(lang) {
  ui = lang;
  document.documentElement.lang = lang;
  document.querySelectorAll("[data-i18n]").forEach(el => { el.textContent = t(el.dataset.i18n); });
  $("ui-de").setAttribute("aria-pressed", String(lang === "de"));
  $("ui-en").setAttribute("aria-pressed", String(lang === "en"));
  render();
}

async function api(path, body) {
  const opts = body === undefined ? {} : { method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body) };
  const res = await fetch(path, opts);
  const data = await res.json().catch(() => ({}));
  if (!res.ok) throw new Error(data.detail || res.statusText);
  return data;
}

async function loadProjects() {
  const { projects: list } = await api("/tagalign/v1/projects");
  $("project").innerHTML = "";
  projects = Object.fromEntries(list.map(p => [p.id, p]));
  for (const p of list) {
    const opt = document.createElement("option");
    opt.value = p.id; opt.textContent = `${p.name || p.id} (${p.recipe})`;
    $("project").appendChild(opt);
  }
}

async function fetchRecord() {
  const id = $("record-id").value.trim();
  if (!id) return;
  try {
    const rec = await api(`/tagalign/v1/records/${encodeURIComponent(id)}`);
    $("title").value = rec.title; $("abstract").value = rec.abstract;
    if (rec.language) $("language").value = rec.language;
    $("status").textContent = "";
  } catch (e) { $("status").textContent = `${t("notFound")}: ${e.message}`; }
}

async function suggest(ev) {
  ev.preventDefault();
  const title = $("title").value.trim();
  if (!title) { $("status").textContent = t("needTitle"); $("title").focus(); return; }
  $("status").textContent = t("working");
  const body = { title, abstract: $("abstract").value, limit: Number($("limit").value) || 10 };
  if ($("language").value) body.language = $("language").value;
  try {
    const { results, warning } = await api(`/tagalign/v1/projects/${encodeURIComponent($("project").value)}/suggest`, body);
    current = { recordId: $("record-id").value.trim() || `web-${Date.now()}`, suggestions: results,
      decisions: {}, title, abstract: body.abstract, language: body.language || null };
    $("status").textContent = t("done", results.length) + (warning ? ` (${warning})` : "");
    render();
  } catch (e) { $("status").textContent = e.message; }
}

async function decide(sid, decision) {
  current.decisions[sid] = current.decisions[sid] === decision ? undefined : decision;
  const accepted = Object.keys(current.decisions).filter(k => current.decisions[k] === "accept");
  const rejected = Object.keys(current.decisions).filter(k => current.decisions[k] === "reject");
  render(sid, decision);
  try {
    await api(`/tagalign/v1/projects/${encodeURIComponent($("project").value)}/learn`, { records: [{ id: current.recordId,
      title: current.title, abstract: current.abstract, language: current.language,
      subjects: accepted, rejected }] });
    $("status").textContent = t("saved");
  } catch (e) { $("status").textContent = e.message; }
}

function reasonsOf(s) {
  const div = document.createElement("div");
  div.className = "reasons";
  const r = s.reasons || {};
  const parts = [];
  if (r.sources) parts.push(`${t("sources")}: ${r.sources.join(", ")}`);
  if (r.label_match) parts.push(`${t("labelMatch")}: „${r.label_match}“`);
  div.textContent = parts.join(" · ");
  if (r.neighbours && r.neighbours.length) {
    const head = document.createElement("div");
    head.textContent = `${t("neighbours")}:`;
    const ul = document.createElement("ul");
    for (const n of r.neighbours) {
      const li = document.createElement("li"); li.textContent = n.title || n.id; ul.appendChild(li);
    }
    div.append(head, ul);
  }
  return div;
}

function render(focusSid, focusDecision) {
  const ol = $("results");
  ol.innerHTML = "";
  const canLearn = learnAllowed();
  $("learn-off").hidden = canLearn || !current.suggestions.length;
  $("learn-off").textContent = t("learnOff");
  for (const s of current.suggestions) {
    const li = document.createElement("li");
    const row = document.createElement("div"); row.className = "subject";
    const label = document.createElement("span"); label.className = "label"; label.textContent = s.label;
    const sid = document.createElement("span"); sid.className = "sid"; sid.textContent = s.id;
    const bar = document.createElement("span"); bar.className = "bar"; bar.setAttribute("role", "img");
    bar.setAttribute("aria-label", `${t("score")} ${s.score.toFixed(3)}`);
    const fill = document.createElement("span"); fill.style.width = `${Math.round(s.score * 100)}%`;
    bar.appendChild(fill);
    const score = document.createElement("span"); score.textContent = s.score.toFixed(3);
    row.append(label, sid, bar, score);
    for (const [decision, cls] of [["accept", "accept"], ["reject", "reject"]]) {
      const b = document.createElement("button");
      b.type = "button"; b.className = cls; b.textContent = t(decision);
      b.dataset.subject = s.id; b.dataset.decision = decision;
      b.setAttribute("aria-pressed", String(current.decisions[s.id] === decision));
      b.setAttribute("aria-label", `${t(decision)}: ${s.label}`);
      if (canLearn) b.addEventListener("click", () => decide(s.id, decision));
      else { b.disabled = true; b.title = t("learnOff"); b.setAttribute("aria-describedby", "learn-off"); }
      row.appendChild(b);
      if (s.id === focusSid && decision === focusDecision) setTimeout(() => b.focus(), 0);
    }
    li.append(row, reasonsOf(s));
    ol.appendChild(li);
  }
  const n = Object.values(current.decisions).filter(d => d === "accept").length;
  $("accepted-count").textContent = t("accepted", n);
}

function exportAccepted() {
  const accepted = current.suggestions.filter(s => current.decisions[s.id] === "accept")
    .map(s => ({ id: s.id, label: s.label, score: s.score }));
  const blob = new Blob([JSON.stringify({ record: current.recordId, title: current.title,
    subjects: accepted }, null, 1)], { type: "application/json" });
  const a = document.createElement("a");
  a.href = URL.createObjectURL(blob); a.download = `${current.recordId || "subjects"}.json`;
  document.body.appendChild(a); a.click(); a.remove();
}

$("record-form").addEventListener("submit", suggest);
$("fetch").addEventListener("click", fetchRecord);
$("export").addEventListener("click", exportAccepted);
$("ui-de").addEventListener("click", () => setUi("de"));
$("ui-en").addEventListener("click", () => setUi("en"));
$("project").addEventListener("change", () => render());
setUi(navigator.language && navigator.language.startsWith("de") ? "de" : "en");
loadProjects().catch(e => { $("status").textContent = e.message; });
