// Flow console: live updates and small conveniences. Hand-written, no
// dependencies; every page and form works without it (progressive
// enhancement). Served from 'self' under a strict Content-Security-Policy.
(function () {
  "use strict";
  var topics = document.body.getAttribute("data-topics");
  var state = document.getElementById("live-state");
  var busy = false, again = false;

  // refresh fetches the page again and swaps its main part, keeping focus
  // and scroll; one fetch at a time, one more if a change came meanwhile.
  function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    fetch(location.href, { headers: { "X-Console-Partial": "1" }, credentials: "same-origin", cache: "no-store" })
      .then(function (res) { return res.ok ? res.text() : null; })
      .then(function (html) {
        if (html === null) { return; }
        var main = document.getElementById("main");
        var focusedId = document.activeElement && document.activeElement.id;
        main.innerHTML = html;
        wire(main);
        if (focusedId) {
          var el = document.getElementById(focusedId);
          if (el) { el.focus({ preventScroll: true }); }
        }
        document.body.setAttribute("data-refreshed", String(Date.now()));
      })
      .catch(function () {})
      .then(function () {
        busy = false;
        if (again) { again = false; refresh(); }
      });
  }

  function wire(root) {
    root.querySelectorAll("[data-confirm]").forEach(function (b) {
      b.addEventListener("click", function (e) {
        if (!window.confirm(b.getAttribute("data-confirm"))) { e.preventDefault(); }
      });
    });
    root.querySelectorAll("select[data-autosubmit]").forEach(function (s) {
      s.addEventListener("change", function () { s.form.submit(); });
    });
  }
  wire(document);

  if (topics && window.EventSource) {
    var first = true;
    var es = new EventSource("/ui/live?topics=" + encodeURIComponent(topics));
    es.addEventListener("open", function () {
      if (state) { state.textContent = "live"; }
      // Whatever changed between rendering and subscribing shows now.
      if (first) { first = false; refresh(); }
    });
    es.addEventListener("error", function () { if (state) { state.textContent = "reconnecting"; } });
    es.addEventListener("change", refresh);
  }
})();
