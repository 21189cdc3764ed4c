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
        var focused = focusKey(document.activeElement);
        var entered = keepEntered(main);
        main.innerHTML = html;
        restoreEntered(main, entered);
        wire(main);
        if (focused) {
          var el = main.querySelector(focused);
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

  // keepEntered notes what the user has entered in the controls that
  // have an id (ticked boxes, typed text) so that a live update does not
  // throw it away; restoreEntered puts it back into the fresh content.
  function keepEntered(root) {
    var out = [];
    root.querySelectorAll("input[id], textarea[id]").forEach(function (el) {
      if (el.type === "checkbox" || el.type === "radio") {
        if (el.checked !== el.defaultChecked) { out.push([el.id, "checked", el.checked]); }
      } else if (el.type !== "hidden" && el.value !== el.defaultValue) {
        out.push([el.id, "value", el.value]);
      }
    });
    return out;
  }
  function restoreEntered(root, entered) {
    entered.forEach(function (e) {
      var el = root.querySelector("#" + CSS.escape(e[0]));
      if (el) { el[e[1]] = e[2]; }
    });
  }

  // focusKey names the focused control so that it can be found again in
  // the fresh content: by id, by rack, or as its form's button.
  function focusKey(el) {
    if (!el || el === document.body) { return null; }
    if (el.id) { return "#" + CSS.escape(el.id); }
    if (el.dataset && el.dataset.rack) { return 'a.rack[data-rack="' + CSS.escape(el.dataset.rack) + '"]'; }
    if (el.form && el.form.getAttribute("action")) { return 'form[action="' + CSS.escape(el.form.getAttribute("action")) + '"] button'; }
    if (el.getAttribute && el.getAttribute("href")) { return 'a[href="' + CSS.escape(el.getAttribute("href")) + '"]'; }
    return null;
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

  // Floor map: arrow keys move between racks (left and right along a row,
  // up and down to the neighbouring row); Enter opens the rack.
  document.addEventListener("keydown", function (e) {
    var a = document.activeElement;
    if (!a || !a.classList || !a.classList.contains("rack")) { return; }
    var row = a.parentElement;
    var racks = Array.prototype.slice.call(row.querySelectorAll("a.rack"));
    var i = racks.indexOf(a), next = null;
    if (e.key === "ArrowRight") { next = racks[i + 1]; }
    else if (e.key === "ArrowLeft") { next = racks[i - 1]; }
    else if (e.key === "ArrowDown" || e.key === "ArrowUp") {
      var rows = Array.prototype.slice.call(document.querySelectorAll(".row"));
      var other = rows[rows.indexOf(row) + (e.key === "ArrowDown" ? 1 : -1)];
      if (other) {
        var rr = other.querySelectorAll("a.rack");
        next = rr[Math.min(i, rr.length - 1)];
      }
    }
    if (next) { next.focus(); e.preventDefault(); }
  });

  if (topics && window.EventSource) {
    var es = new EventSource("/ui/live?topics=" + encodeURIComponent(topics));
    es.addEventListener("open", function () {
      if (state) { state.textContent = "live"; }
      // Whatever changed between rendering (or losing the stream: a
      // server restart) and subscribing shows now.
      refresh();
    });
    es.addEventListener("error", function () { if (state) { state.textContent = "reconnecting"; } });
    es.addEventListener("change", refresh);
  }
})();
