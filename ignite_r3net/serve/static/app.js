// The demo page: one model run per photo. The chosen photo is posted once for its refined cutout (the map as
// alpha, the subject's own colours where the map is soft); the map, the threshold, the refinement and the
// background are then composed here from that cutout and the photo, so changing them costs no model run.
"use strict";

const $ = (id) => document.getElementById(id);
let photo = null; // the chosen File
let layers = null; // the photo's pixels and the server's refined cutout, RGBA, of one size
let backdropImage = null; // the ImageBitmap chosen as background
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

async function ask() {
  const params = new URLSearchParams({ output: "cutout", refine: "true", background: "none" });
  if ($("max-side").value) params.set("max_side", $("max-side").value);
  const form = new FormData();
  form.append("image", photo, photo.name);
  const response = await fetch("predict?" + params.toString(), { method: "POST", body: form });
  if (!response.ok) {
    let text = response.status + " " + response.statusText;
    try { text = (await response.json()).error || text; } catch (e) { /* not JSON */ }
    throw new Error(text);
  }
  const timing = /dur=([\d.]+)/.exec(response.headers.get("Server-Timing") || "");
  return { blob: await response.blob(), ms: timing ? Number(timing[1]) : null };
}

// the RGBA pixels of an image file, as decoded (EXIF orientation applied, no colour management: as the server)
async function pixelsOf(blob, width, height) {
  const bitmap = await createImageBitmap(blob, { colorSpaceConversion: "none", premultiplyAlpha: "none" });
  const canvas = document.createElement("canvas");
  canvas.width = width || bitmap.width;
  canvas.height = height || bitmap.height;
  const context = canvas.getContext("2d");
  context.drawImage(bitmap, 0, 0);
  return context.getImageData(0, 0, canvas.width, canvas.height);
}

async function run() {
  if (!photo) return;
  const mine = ++generation;
  showError("");
  $("timing").textContent = "working…";
  try {
    const answer = await ask();
    const refined = await pixelsOf(answer.blob);
    let own = refined; // a photo the browser cannot decode: the server's pixels
    try { own = await pixelsOf(photo, refined.width, refined.height); } catch (e) { /* keep the server's */ }
    if (mine !== generation) return;
    layers = { width: refined.width, height: refined.height, refined: refined.data, photo: own.data };
    $("timing").textContent = "server: " + answer.ms.toFixed(0) + " ms (one model run; the rest is composed here)";
    await compose();
  } catch (e) {
    if (mine !== generation) return;
    layers = null;
    for (const kind of ["map", "cutout"]) {
      $(kind + "-img").removeAttribute("src");
      $(kind + "-download").hidden = true;
    }
    $("timing").textContent = "";
    showError("error: " + e.message);
  }
}

// the background's pixels at the photo's size (an image scaled to cover it, centred), or null: transparent
function backdrop(width, height) {
  const choice = $("background").value;
  if (choice === "none" || (choice === "image" && !backdropImage)) return null;
  const canvas = document.createElement("canvas");
  canvas.width = width;
  canvas.height = height;
  const context = canvas.getContext("2d");
  if (choice === "image") {
    const scale = Math.max(width / backdropImage.width, height / backdropImage.height);
    const w = backdropImage.width * scale, h = backdropImage.height * scale;
    context.drawImage(backdropImage, (width - w) / 2, (height - h) / 2, w, h);
  } else {
    context.fillStyle = choice === "colour" ? $("background-colour").value : choice;
    context.fillRect(0, 0, width, height);
  }
  return context.getImageData(0, 0, width, height).data;
}

// predict's rules: the threshold makes the alpha hard (then the photo's own colours), the refinement takes the
// subject's colours where the alpha is soft, a background is composited in integers as the server does
async function compose() {
  if (!layers) return;
  const { width, height, refined, photo: own } = layers;
  const threshold = Number($("threshold").value);
  const colours = $("refine").checked && threshold === 0 ? refined : own;
  const behind = backdrop(width, height);
  const map = new ImageData(width, height);
  const cutout = new ImageData(width, height);
  for (let i = 0; i < refined.length; i += 4) {
    let alpha = refined[i + 3];
    if (threshold > 0) alpha = alpha / 255 >= threshold ? 255 : 0;
    map.data[i] = map.data[i + 1] = map.data[i + 2] = alpha;
    map.data[i + 3] = 255;
    for (let c = 0; c < 3; c++) {
      cutout.data[i + c] = behind
        ? Math.floor((alpha * colours[i + c] + (255 - alpha) * behind[i + c] + 127) / 255)
        : colours[i + c];
    }
    cutout.data[i + 3] = behind ? 255 : alpha;
  }
  await Promise.all([show("map", map), show("cutout", cutout)]);
}

async function show(kind, pixels) {
  const canvas = document.createElement("canvas");
  canvas.width = pixels.width;
  canvas.height = pixels.height;
  canvas.getContext("2d").putImageData(pixels, 0, 0);
  setImage(kind, await new Promise((resolve) => canvas.toBlob(resolve, "image/png")));
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

async function chooseBackground() {
  const choice = $("background").value;
  $("background-colour").hidden = choice !== "colour";
  if (choice === "image") {
    $("background-file").click(); // another image: compose follows the file's choice
    if (!backdropImage) return;
  }
  await compose();
}

$("file").addEventListener("change", (event) => choose(event.target.files[0]));
$("threshold").addEventListener("input", () => { showThreshold(); compose(); });
$("max-side").addEventListener("change", run);
$("refine").addEventListener("change", compose);
$("background").addEventListener("change", chooseBackground);
$("background-colour").addEventListener("input", compose);
$("background-file").addEventListener("change", async (event) => {
  const file = event.target.files[0];
  if (!file) return;
  try {
    backdropImage = await createImageBitmap(file);
    await compose();
  } catch (e) {
    showError("error: the background " + file.name + " is not an image this browser reads");
  }
});
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
