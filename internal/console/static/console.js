// sandpit console: live executions list, refresh of a running record, and the run form's
// input check. No inline script anywhere (the CSP forbids it); text from the daemon is only
// ever set as text, except the list's rows, which the server renders and escapes.
"use strict";
(function () {
  var POLL_MS = 2000;

  // The executions list: refetch the rows while the page is visible.
  var rows = document.getElementById("rows");
  if (rows && rows.dataset.live) {
    var status = document.getElementById("live-status");
    var busy = false;
    var tick = function () {
      if (document.hidden || busy) return;
      busy = true;
      fetch(rows.dataset.live, { credentials: "same-origin", headers: { "Accept": "text/html" } })
        .then(function (r) {
          if (!r.ok) throw new Error("the daemon answered " + r.status);
          return r.text();
        })
        .then(function (html) {
          if (html !== rows.dataset.last) {
            rows.innerHTML = html; // rendered and escaped by the server's html/template
            rows.dataset.last = html;
          }
          if (status) status.textContent = "Live: new runs appear as they start and finish.";
        })
        .catch(function (e) {
          if (status) status.textContent = "Live updates paused: " + e.message + ". Retrying.";
        })
        .finally(function () { busy = false; });
    };
    setInterval(tick, POLL_MS);
    document.addEventListener("visibilitychange", tick);
  }

  // A running execution's page reloads until the run has finished.
  var running = document.querySelector("[data-running]");
  if (running) {
    setTimeout(function () { if (!document.hidden) location.reload(); }, POLL_MS);
  }

  // "/" focuses the first filter, as in many consoles.
  document.addEventListener("keydown", function (ev) {
    if (ev.key !== "/" || ev.ctrlKey || ev.metaKey || ev.altKey) return;
    var t = ev.target;
    if (t && (t.tagName === "INPUT" || t.tagName === "TEXTAREA" || t.tagName === "SELECT")) return;
    var f = document.querySelector(".filters input, .filters select");
    if (f) { ev.preventDefault(); f.focus(); }
  });

  // The run form: the input must be JSON, and is checked against the basics of the input
  // schema (type, required, properties' types) before it is sent; the daemon checks it fully.
  var form = document.getElementById("run-form");
  if (form) {
    var input = document.getElementById("run-input");
    var problem = document.getElementById("run-problem");
    var schema = null;
    try { schema = form.dataset.schema ? JSON.parse(form.dataset.schema) : null; } catch (e) { schema = null; }
    var show = function (msg) {
      problem.textContent = msg;
      problem.hidden = !msg;
      input.setAttribute("aria-invalid", msg ? "true" : "false");
    };
    form.addEventListener("submit", function (ev) {
      var value;
      try {
        value = JSON.parse(input.value.trim() === "" ? "null" : input.value);
      } catch (e) {
        ev.preventDefault();
        show("The input is not valid JSON: " + e.message);
        input.focus();
        return;
      }
      var msg = check(schema, value, "");
      if (msg) {
        ev.preventDefault();
        show(msg);
        input.focus();
        return;
      }
      show("");
      var button = document.getElementById("run-button");
      if (button) { button.disabled = true; button.textContent = "Running…"; }
    });
  }

  function typeOf(v) {
    if (v === null) return "null";
    if (Array.isArray(v)) return "array";
    if (typeof v === "number") return Number.isInteger(v) ? "integer" : "number";
    return typeof v;
  }

  function fits(want, v) {
    var got = typeOf(v);
    return want === got || (want === "number" && got === "integer");
  }

  function check(s, v, at) {
    if (!s || typeof s !== "object") return "";
    if (s.type) {
      var types = Array.isArray(s.type) ? s.type : [s.type];
      if (!types.some(function (t) { return fits(t, v); })) {
        return (at || "the input") + " must be " + types.join(" or ") + ", not " + typeOf(v);
      }
    }
    if (typeOf(v) === "object") {
      var req = Array.isArray(s.required) ? s.required : [];
      for (var i = 0; i < req.length; i++) {
        if (!Object.prototype.hasOwnProperty.call(v, req[i])) return (at || "the input") + " needs the property \"" + req[i] + "\"";
      }
      var props = s.properties && typeof s.properties === "object" ? s.properties : {};
      for (var k in props) {
        if (Object.prototype.hasOwnProperty.call(v, k)) {
          var m = check(props[k], v[k], (at || "") + "/" + k);
          if (m) return m;
        }
      }
    }
    return "";
  }
})();
