// The dashboard's only script (no inline script: the Content-Security-Policy forbids it).
// An input marked data-submit-on-change submits its form when it changes (the timeline's slider).
document.addEventListener("DOMContentLoaded", () => {
  for (const input of document.querySelectorAll("[data-submit-on-change]")) {
    input.addEventListener("change", () => input.form.submit());
  }
});
