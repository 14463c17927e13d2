// tagalign web page: plain JS, no build step, nothing loaded from outside.
"use strict";
const I18N = {
  en: { tagline: "GND subject suggestions for library records", record: "Record", project: "Project",
    language: "Language", auto: "detect", limit: "Subjects", recordId: "Record id", fetch: "Fetch record",
    title: "Title", abstract: "Abstract", suggest: "Suggest subjects", suggestions: "Suggestions",
    export: "Export accepted (JSON)", accept: "Accept", reject: "Reject", working: "Working…",
    done: n => `${n} suggestions`, accepted: n => `${n} accepted`, sources: "Sources",
    labelMatch: "Label found in the text", altLabel: "through the alternative label", neighbours: "Similar records", notFound: "Record not found",
    needTitle: "Please enter a title", saved: "Saved", score: "score",
    queue: "Review queue", next: "Finish and next", keys: "Keys", keyMove: "next / previous subject",
    keyAccept: "accept the marked subject", keyReject: "reject the marked subject",
    keyAdd: "search a subject to add (Enter adds the marked match, Esc goes back)",
    keyNext: "finish this record and show the next", add: "Add a subject",
    addHint: "label in German or English, e.g. Holzschutz", added: "added", gnd: "GND record",
    position: (q) => `Record ${q.position + 1} of ${q.size} · ${q.finished} finished`
      + (q.estimated ? ` · ${q.skipped} released (estimated recall ≥ ${q.release_above})` : ""),
    allDone: (q) => `All ${q.size} records finished`, noMatch: "no subject starts with this",
    recall: n => `About ${n} in 10 of the right subjects are in this list.`,
    domains: "Domains",
    precision: n => `About ${n} in 10 of these suggestions are right.`,
    learnOff: "Accept/reject is off: this project does not learn from feedback (allow_learn).",
    learnReadOnly: "Accept/reject is off: this project is served read-only (--mmap).",
    pausedUnavailable: "Learning is paused: the feedback store is unavailable. Accept/reject works again once it is back.",
    pausedFull: "Learning is paused: the feedback store is full. Accept/reject works again once space is freed.",
    tokenTitle: "API token", tokenLabel: "Token", tokenOk: "Use token", cancel: "Cancel",
    tokenWhy: "This server needs an API token to save. Its administrator gives you one; this page keeps it until the tab is closed.",
    tokenWrong: "The server does not know this token. Please enter another one.",
    forgetToken: "Forget token", tokenForgotten: "Token forgotten" },
  de: { tagline: "GND-Schlagwortvorschläge für Katalogdatensätze", record: "Datensatz", project: "Projekt",
    language: "Sprache", auto: "erkennen", limit: "Schlagwörter", recordId: "Datensatz-ID", fetch: "Datensatz laden",
    title: "Titel", abstract: "Zusammenfassung", suggest: "Schlagwörter vorschlagen", suggestions: "Vorschläge",
    export: "Angenommene exportieren (JSON)", accept: "Annehmen", reject: "Ablehnen", working: "Arbeite…",
    done: n => `${n} Vorschläge`, accepted: n => `${n} angenommen`, sources: "Quellen",
    labelMatch: "Bezeichnung im Text gefunden", altLabel: "über die abweichende Bezeichnung", neighbours: "Ähnliche Datensätze", notFound: "Datensatz nicht gefunden",
    needTitle: "Bitte einen Titel eingeben", saved: "Gespeichert", score: "Wert",
    queue: "Warteschlange", next: "Abschließen und weiter", keys: "Tasten", keyMove: "nächstes / voriges Schlagwort",
    keyAccept: "markiertes Schlagwort annehmen", keyReject: "markiertes Schlagwort ablehnen",
    keyAdd: "Schlagwort zum Hinzufügen suchen (Enter fügt den markierten Treffer hinzu, Esc zurück)",
    keyNext: "Datensatz abschließen, nächsten zeigen", add: "Schlagwort hinzufügen",
    addHint: "Bezeichnung deutsch oder englisch, z. B. Holzschutz", added: "hinzugefügt", gnd: "GND-Datensatz",
    position: (q) => `Datensatz ${q.position + 1} von ${q.size} · ${q.finished} abgeschlossen`
      + (q.estimated ? ` · ${q.skipped} freigegeben (geschätzte Vollständigkeit ≥ ${q.release_above})` : ""),
    allDone: (q) => `Alle ${q.size} Datensätze abgeschlossen`, noMatch: "kein Schlagwort beginnt so",
    recall: n => `Etwa ${n} von 10 der richtigen Schlagwörter stehen in dieser Liste.`,
    domains: "Fachgebiete",
    precision: n => `Etwa ${n} von 10 dieser Vorschläge sind richtig.`,
    learnOff: "Annehmen/Ablehnen ist aus: dieses Projekt lernt nicht aus Rückmeldungen (allow_learn).",
    learnReadOnly: "Annehmen/Ablehnen ist aus: dieses Projekt wird schreibgeschützt bereitgestellt (--mmap).",
    pausedUnavailable: "Lernen ist pausiert: der Rückmeldungsspeicher ist nicht erreichbar. Annehmen/Ablehnen geht wieder, sobald er zurück ist.",
    pausedFull: "Lernen ist pausiert: der Rückmeldungsspeicher ist voll. Annehmen/Ablehnen geht wieder, sobald Platz frei ist.",
    tokenTitle: "API-Token", tokenLabel: "Token", tokenOk: "Token verwenden", cancel: "Abbrechen",
    tokenWhy: "Zum Speichern braucht dieser Server ein API-Token. Sie erhalten es von seiner Administration; diese Seite behält es, bis der Tab geschlossen wird.",
    tokenWrong: "Der Server kennt dieses Token nicht. Bitte ein anderes eingeben.",
    forgetToken: "Token vergessen", tokenForgotten: "Token vergessen" },
};
let ui = "en";
let current = { recordId: null, suggestions: [], decisions: {}, quality: null, domains: null, selected: 0 };
let queue = null;  // where the server's review queue stands (GET …/queue), null without one
let saving = Promise.resolve();  // decisions are stored in order, and before "next" moves on
const GND = "https://d-nb.info/gnd/";
let projects = {};  // id → the project as /tagalign/v1/projects lists it
const $ = id => document.getElementById(id);
const t = (key, arg) => { const v = I18N[ui][key]; return typeof v === "function" ? v(arg) : v; };

function setUi(lang) {
  ui = lang;
  document.documentElement.lang = lang;
  document.querySelectorAll("[data-i18n]").forEach(el => { el.textContent = t(el.dataset.i18n); });
  document.querySelectorAll("[data-i18n-placeholder]").forEach(el => { el.placeholder = t(el.dataset.i18nPlaceholder); });
  renderQueue();
  $("ui-de").setAttribute("aria-pressed", String(lang === "de"));
  $("ui-en").setAttribute("aria-pressed", String(lang === "en"));
  render();
}

// -- API tokens: a server with a tokens file answers a write without one 401, an unknown one 403
// with a Bearer challenge; the page then asks once, keeps the token for this tab and sends it always.
const TOKEN_KEY = "tagalign-token";
let asking = null;  // one dialog for every request that waits for a token

function askToken(wrong) {
  if (!asking) {
    asking = new Promise(resolve => {
      const dlg = $("token-dialog");
      $("token-why").textContent = t(wrong ? "tokenWrong" : "tokenWhy");
      $("token-input").value = "";
      dlg.addEventListener("close", () => {
        const token = dlg.returnValue === "ok" ? $("token-input").value.trim() : "";
        if (token) sessionStorage.setItem(TOKEN_KEY, token);
        renderToken();
        resolve(token || null);
      }, { once: true });
      dlg.returnValue = "";
      dlg.showModal();
    }).finally(() => { asking = null; });
  }
  return asking;
}

function forgetToken() {
  sessionStorage.removeItem(TOKEN_KEY);
  renderToken();
  $("status").textContent = t("tokenForgotten");
}

function renderToken() { $("forget-token").hidden = !sessionStorage.getItem(TOKEN_KEY); }

async function api(path, body) {
  for (;;) {
    const headers = body === undefined ? {} : { "Content-Type": "application/json" };
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (token) headers.Authorization = `Bearer ${token}`;
    const res = await fetch(path, body === undefined ? { headers }
      : { method: "POST", headers, body: JSON.stringify(body) });
    const data = await res.json().catch(() => ({}));
    const unknown = res.status === 403 && res.headers.has("WWW-Authenticate");
    if (res.status === 401 || unknown) {
      if (unknown) { sessionStorage.removeItem(TOKEN_KEY); renderToken(); }
      if (await askToken(unknown)) continue;  // cancelled: the server's answer stands
    }
    if (!res.ok) throw Object.assign(new Error(data.detail || res.statusText), { status: res.status });
    return data;
  }
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

const projectPath = () => `/tagalign/v1/projects/${encodeURIComponent($("project").value)}`;

// -- whether accept/reject can be stored: the project's `learning` (on; off: it does not learn;
// paused: its feedback store is unavailable or full). While paused the buttons stay disabled with
// the reason, and the page asks the server again every PAUSE_POLL_MS until learning is on.
const PAUSE_POLL_MS = 2000;
const STORE_FAULTS = { 503: "unavailable", 507: "no_space" };  // a learn's answer: nothing stored
let pollTimer = null;

function learnBlocked() {  // the reason accept/reject is off now, or null
  const p = projects[$("project").value];
  const l = (p && p.learning) || { state: "on" };
  if (l.state === "off") return t(l.reason === "read_only" ? "learnReadOnly" : "learnOff");
  if (l.state === "paused") return t(l.reason === "no_space" ? "pausedFull" : "pausedUnavailable");
  return null;
}

function pauseLearning(pid, reason) {
  if (projects[pid]) projects[pid].learning = { state: "paused", reason };
  render();
  watchLearning();
}

function watchLearning() {  // while the chosen project's learning is paused: ask again
  clearTimeout(pollTimer);
  const p = projects[$("project").value];
  if (!p || !p.learning || p.learning.state !== "paused") return;
  pollTimer = setTimeout(async () => {
    try {
      const fresh = await api(projectPath());
      projects[fresh.id] = fresh;
      if (fresh.learning.state !== "paused") $("status").textContent = "";
      render();
    } catch { /* the server away too: ask again */ }
    watchLearning();
  }, PAUSE_POLL_MS);
}

async function suggest(ev) {
  ev.preventDefault();
  await runSuggest($("record-id").value.trim() || `web-${Date.now()}`);
}

// Suggestions for the record in the form; `decisions`, `labels` and `added` (the subjects
// found by search) restore what was stored.
async function runSuggest(recordId, decisions = {}, labels = {}, added = []) {
  const title = $("title").value.trim();
  if (!title) { $("status").textContent = t("needTitle"); $("title").focus(); return; }
  $("status").textContent = t("working");
  const body = { title, abstract: $("abstract").value, limit: Number($("limit").value) || 10 };
  if ($("language").value) body.language = $("language").value;
  try {
    const { results, warning, quality, domains } = await api(`${projectPath()}/suggest`, body);
    current = { recordId, suggestions: results, decisions: { ...decisions }, title,
      abstract: body.abstract, language: body.language || null, quality: quality || null,
      domains: domains || null, selected: 0 };
    for (const s of results) if (added.includes(s.id)) s.added = true;  // suggested by now
    for (const sid of Object.keys(decisions)) {  // subjects added by search earlier
      if (!results.some(s => s.id === sid)) current.suggestions.push({ id: sid, label: labels[sid] || sid, score: null, added: true });
    }
    $("status").textContent = t("done", results.length) + (warning ? ` (${warning})` : "");
    render();
  } catch (e) { $("status").textContent = e.message; }
}

function decide(sid, decision) {  // a button: pressing it again takes the decision back
  setDecision(sid, current.decisions[sid] === decision ? undefined : decision, sid, decision);
}

function setDecision(sid, decision, focusSid, focusDecision) {
  const blocked = learnBlocked();  // keys and search too, not only the buttons
  if (blocked) { $("status").textContent = blocked; return saving; }
  const before = current.decisions[sid];
  current.decisions[sid] = decision;
  const rec = current, pid = $("project").value;
  const accepted = Object.keys(rec.decisions).filter(k => rec.decisions[k] === "accept");
  const rejected = Object.keys(rec.decisions).filter(k => rec.decisions[k] === "reject");
  // found by search, not suggested: the catalogue export tells the two apart
  const added = rec.suggestions.filter(s => s.added && rec.decisions[s.id]).map(s => s.id);
  render(focusSid, focusDecision);
  const learn = { records: [{ id: rec.recordId, title: rec.title, abstract: rec.abstract,
    language: rec.language, subjects: accepted, rejected, added }] };
  saving = saving.then(() => api(`/tagalign/v1/projects/${encodeURIComponent(pid)}/learn`, learn))
    .then(() => { $("status").textContent = t("saved"); })
    .catch(e => {
      if (e.status in STORE_FAULTS) {  // nothing was stored: the decision is taken back
        if (rec.decisions[sid] === decision) rec.decisions[sid] = before;
        pauseLearning(pid, STORE_FAULTS[e.status]);
      }
      $("status").textContent = e.message;
    });
  return saving;
}

function reasonsOf(s) {
  const div = document.createElement("div");
  div.className = "reasons";
  const r = s.reasons || {};
  const parts = [];
  if (r.sources) parts.push(`${t("sources")}: ${r.sources.join(", ")}`);
  if (r.label_match) parts.push(`${t("labelMatch")}: „${r.label_match}“`);
  if (r.matched) parts.push(`${t("altLabel")} „${r.matched}“`);
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

function qualityText(q) {
  const tenths = x => Math.round(x * 10);
  const parts = [];
  if (typeof q.recall === "number") parts.push(t("recall", tenths(q.recall)));
  if (typeof q.precision === "number") parts.push(t("precision", tenths(q.precision)));
  return parts.join(" ");
}

function render(focusSid, focusDecision) {
  const q = current.quality;
  $("quality").hidden = !q;
  $("quality").textContent = q ? qualityText(q) : "";
  const d = current.domains;  // the project's domain model, if it has one
  $("domains").hidden = !d;
  $("domains").textContent = d ? `${t("domains")}: ` + d.map(x => `${x.label} (${x.score.toFixed(2)})`).join(", ") : "";
  const ol = $("results");
  ol.innerHTML = "";
  const blocked = learnBlocked();
  const paused = blocked && projects[$("project").value].learning.state === "paused";
  $("learn-off").hidden = !blocked || !(paused || current.suggestions.length);
  $("learn-off").textContent = blocked || "";
  $("learn-off").classList.toggle("paused", Boolean(paused));
  current.suggestions.forEach((s, i) => {
    const li = document.createElement("li");
    li.dataset.subject = s.id;
    if (i === current.selected) { li.classList.add("selected"); li.setAttribute("aria-current", "true"); }
    const row = document.createElement("div"); row.className = "subject";
    const label = document.createElement("a"); label.className = "label"; label.textContent = s.label;
    label.href = GND + encodeURIComponent(s.id); label.target = "_blank"; label.rel = "noopener";
    label.title = t("gnd");
    const sid = document.createElement("span"); sid.className = "sid"; sid.textContent = s.id;
    row.append(label, sid);
    if (s.score === null || s.score === undefined) {
      const tag = document.createElement("span"); tag.className = "added"; tag.textContent = t("added");
      row.appendChild(tag);
    } else {
      const bar = document.createElement("span"); bar.className = "bar"; bar.setAttribute("role", "img");
      bar.setAttribute("aria-label", `${t("score")} ${s.score.toFixed(3)}`);
      const fill = document.createElement("span"); fill.style.width = `${Math.round(s.score * 100)}%`;
      bar.appendChild(fill);
      const score = document.createElement("span"); score.textContent = s.score.toFixed(3);
      row.append(bar, score);
    }
    for (const [decision, cls] of [["accept", "accept"], ["reject", "reject"]]) {
      const b = document.createElement("button");
      b.type = "button"; b.className = cls; b.textContent = t(decision);
      b.dataset.subject = s.id; b.dataset.decision = decision;
      b.setAttribute("aria-pressed", String(current.decisions[s.id] === decision));
      b.setAttribute("aria-label", `${t(decision)}: ${s.label}`);
      if (!blocked) b.addEventListener("click", () => { current.selected = i; decide(s.id, decision); });
      else { b.disabled = true; b.title = blocked; b.setAttribute("aria-describedby", "learn-off"); }
      row.appendChild(b);
      if (s.id === focusSid && decision === focusDecision) setTimeout(() => b.focus(), 0);
    }
    li.append(row, reasonsOf(s));
    ol.appendChild(li);
  });
  const n = Object.values(current.decisions).filter(d => d === "accept").length;
  $("accepted-count").textContent = t("accepted", n);
}

// -- adding any subject of the vocabulary: search by label prefix --------------------------
let searchSeq = 0;
let matches = [];
let marked = 0;

async function searchSubjects() {
  const prefix = $("subject-search").value.trim();
  const seq = ++searchSeq;
  if (!prefix) { showMatches([]); return; }
  try {
    const { subjects } = await api(`${projectPath()}/subjects?prefix=${encodeURIComponent(prefix)}&limit=10`);
    if (seq === searchSeq) showMatches(subjects);  // an answer to an older keystroke is dropped
  } catch (e) { $("status").textContent = e.message; }
}

function showMatches(found) {
  matches = found; marked = 0;
  const ul = $("subject-options");
  ul.innerHTML = "";
  found.forEach((m, i) => {
    const li = document.createElement("li");
    li.id = `subject-option-${i}`; li.setAttribute("role", "option"); li.dataset.subject = m.id;
    li.setAttribute("aria-selected", String(i === marked));
    const other = Object.entries(m.labels).filter(([, l]) => l !== m.matched).map(([g, l]) => `${g}: ${l}`);
    li.textContent = `${m.matched} (${m.language}) · ${m.id}` + (other.length ? ` · ${other.join(" · ")}` : "");
    li.addEventListener("mousedown", ev => { ev.preventDefault(); addSubject(m); });
    ul.appendChild(li);
  });
  if (!found.length && $("subject-search").value.trim()) {
    const li = document.createElement("li"); li.className = "none"; li.textContent = t("noMatch"); ul.appendChild(li);
  }
  $("subject-search").setAttribute("aria-expanded", String(found.length > 0));
  markOption(0);
}

function markOption(i) {
  if (!matches.length) { $("subject-search").removeAttribute("aria-activedescendant"); return; }
  marked = (i + matches.length) % matches.length;
  document.querySelectorAll("#subject-options [role=option]").forEach((li, j) => li.setAttribute("aria-selected", String(j === marked)));
  $("subject-search").setAttribute("aria-activedescendant", `subject-option-${marked}`);
}

function addSubject(m) {
  if (!current.title) { $("status").textContent = t("needTitle"); return; }
  let i = current.suggestions.findIndex(s => s.id === m.id);
  if (i < 0) {
    // shown in the record's language when the subject has a label in it
    current.suggestions.push({ id: m.id, label: m.labels[current.language] || m.label, score: null, added: true });
    i = current.suggestions.length - 1;
  }
  current.selected = i;
  $("subject-search").value = "";
  showMatches([]);
  setDecision(m.id, "accept");
}

function searchKeys(ev) {
  if (ev.key === "ArrowDown") { ev.preventDefault(); markOption(marked + 1); }
  else if (ev.key === "ArrowUp") { ev.preventDefault(); markOption(marked - 1); }
  else if (ev.key === "Enter") { ev.preventDefault(); if (matches.length) addSubject(matches[marked]); }
  else if (ev.key === "Escape") { $("subject-search").value = ""; showMatches([]); $("subject-search").blur(); }
}

// -- the review queue -----------------------------------------------------------------------
async function loadQueue() {
  try { queue = await api(`${projectPath()}/queue`); } catch { queue = null; }  // 404: no queue
  renderQueue();
  if (queue && queue.position !== null) await loadItem(queue.position);
}

function renderQueue() {
  $("queue").hidden = !queue;
  if (!queue) return;
  $("queue-progress").textContent = queue.position === null ? t("allDone", queue) : t("position", queue);
  $("queue-next").disabled = queue.position === null;
}

async function loadItem(position) {
  const item = await api(`${projectPath()}/queue/${position}`);
  const rec = item.record;
  $("record-id").value = rec.id; $("title").value = rec.title; $("abstract").value = rec.abstract;
  $("language").value = rec.language || "";
  await runSuggest(rec.id, item.decisions, item.labels || {}, item.added || []);
}

async function nextRecord() {
  if (!queue || queue.position === null) return;
  await saving;  // the record's last decision is stored before it counts as finished
  try {
    queue = await api(`${projectPath()}/queue/${queue.position}/finish`, {});
  } catch (e) { $("status").textContent = e.message; return; }
  renderQueue();
  if (queue.position !== null) await loadItem(queue.position);
  else { current = { recordId: null, suggestions: [], decisions: {}, quality: null, domains: null, selected: 0 }; render(); }
}

// -- keys: anywhere but in a text field ----------------------------------------------------
function pageKeys(ev) {
  const el = ev.target;
  if (ev.ctrlKey || ev.metaKey || ev.altKey || (el.closest && el.closest("input, textarea, select, dialog"))) return;
  const s = current.suggestions[current.selected];
  const move = d => { if (current.suggestions.length) { current.selected = (current.selected + d + current.suggestions.length) % current.suggestions.length;
    render(); document.querySelector("#results li.selected").scrollIntoView({ block: "nearest" }); } };
  const acts = {
    j: () => move(1), ArrowDown: () => move(1), k: () => move(-1), ArrowUp: () => move(-1),
    a: () => s && setDecision(s.id, "accept"), r: () => s && setDecision(s.id, "reject"),
    "/": () => $("subject-search").focus(), n: () => nextRecord(),
  };
  if (ev.key in acts) { ev.preventDefault(); acts[ev.key](); }
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
$("subject-search").addEventListener("input", () => { clearTimeout(searchSubjects.timer); searchSubjects.timer = setTimeout(searchSubjects, 80); });
$("subject-search").addEventListener("keydown", searchKeys);
$("queue-next").addEventListener("click", nextRecord);
$("project").addEventListener("change", () => { render(); watchLearning(); loadQueue(); });
$("forget-token").addEventListener("click", forgetToken);
renderToken();
document.addEventListener("keydown", pageKeys);
setUi(navigator.language && navigator.language.startsWith("de") ? "de" : "en");
loadProjects().then(() => { render(); watchLearning(); return loadQueue(); })
  .catch(e => { $("status").textContent = e.message; });
