// The demo page: post the chosen photo to /predict twice (the map and the cutout), show both beside it.
"use strict";

const $ = (id) => document.getElementById(id);
let photo = null; // the chosen File
let generation = 0; // answers of an older request are dropped
const urls = {};

function showError(text) {
  const box = $("error");
  box.textContent = text;
  box.hidden = !text;
}

function setImage(kind, blob) {
  if (urls[kind]) URL.revokeObjectURL(urls[kind]);
  urls[kind] = URL.createObjectURL(blob);
  $(kind + "-img").src = urls[kind];
  const link = $(kind + "-download");
  if (link) {
    link.href = urls[kind];
    link.download = (photo ? photo.name.replace(/\.[^.]*$/, "") : "image") + "-" + kind + ".png";
    link.hidden = false;
  }
}

function query(output) {
  const params = new URLSearchParams({ output });
  const threshold = Number($("threshold").value);
  if (threshold > 0) params.set("threshold", threshold.toFixed(2));
  if ($("max-side").value) params.set("max_side", $("max-side").value);
  return "predict?" + params.toString();
}

async function ask(output) {
  const form = new FormData();
  form.append("image", photo, photo.name);
  const response = await fetch(query(output), { method: "POST", body: form });
  if (!response.ok) {
    let text = response.status + " " + response.statusText;
    try { text = (await response.json()).error || text; } catch (e) { /* not JSON */ }
    throw new Error(text);
  }
  const timing = /dur=([\d.]+)/.exec(response.headers.get("Server-Timing") || "");
  return { blob: await response.blob(), ms: timing ? Number(timing[1]) : null };
}

async function run() {
  if (!photo) return;
  const mine = ++generation;
  showError("");
  $("timing").textContent = "working…";
  try {
    const [map, cutout] = await Promise.all([ask("map"), ask("cutout")]);
    if (mine !== generation) return;
    setImage("map", map.blob);
    setImage("cutout", cutout.blob);
    $("timing").textContent = "server: map " + map.ms.toFixed(0) + " ms, cutout " + cutout.ms.toFixed(0) + " ms";
  } catch (e) {
    if (mine !== generation) return;
    for (const kind of ["map", "cutout"]) {
      $(kind + "-img").removeAttribute("src");
      $(kind + "-download").hidden = true;
    }
    $("timing").textContent = "";
    showError("error: " + e.message);
  }
}

function choose(file) {
  if (!file) return;
  photo = file;
  if (urls.photo) URL.revokeObjectURL(urls.photo);
  urls.photo = URL.createObjectURL(file);
  $("photo-img").src = urls.photo;
  run();
}

function showThreshold() {
  const value = Number($("threshold").value);
  $("threshold-value").textContent = value > 0 ? value.toFixed(2) : "soft";
}

$("file").addEventListener("change", (event) => choose(event.target.files[0]));
$("threshold").addEventListener("input", showThreshold);
$("threshold").addEventListener("change", run);
$("max-side").addEventListener("change", run);
const drop = $("drop");
drop.addEventListener("dragover", (event) => { event.preventDefault(); drop.classList.add("over"); });
drop.addEventListener("dragleave", () => drop.classList.remove("over"));
drop.addEventListener("drop", (event) => {
  event.preventDefault();
  drop.classList.remove("over");
  choose(event.dataTransfer.files[0]);
});

fetch("healthz")
  .then((response) => response.json())
  .then((health) => {
    const what = health.backbone ? "R3Net " + health.backbone : "exported R3Net";
    $("model").textContent = "model: " + health.model + " (" + what + ", " + health.provider + " on " + health.device + ")";
  })
  .catch(() => { $("model").textContent = "model: (the server did not answer /healthz)"; });
showThreshold();
