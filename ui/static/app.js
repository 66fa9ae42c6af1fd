// The console's one script (progressive enhancement: every page works
// without it). It follows the live stream of the page's scope and, when a
// new generation lands, fetches the page again and swaps the regions
// marked data-live-region, leaving forms and focus alone. A page marked
// data-live-poll (an open change: its reports are not on the stream) is
// fetched again every that many milliseconds instead.
(function () {
  "use strict";
  var page = document.querySelector("[data-live-scope]");
  var all = document.querySelector("[data-live-all]");
  var poll = document.querySelector("[data-live-poll]");
  var internal = all ? (all.getAttribute("data-internal-roots") || "").split(" ") : [];
  if (!page && !all && !poll) { return; }
  var prefix = document.querySelector("link[rel=stylesheet]").getAttribute("href").replace(/\/static\/app\.css$/, "");
  var scope = page ? page.getAttribute("data-live-scope") : "";
  var shown = page ? Number(page.getAttribute("data-generation")) : -1;
  var url = prefix + "/live" + (scope ? "?s=" + encodeURIComponent(scope) : "");
  var live = document.getElementById("live");
  var busy = false, again = false, timer = 0;

  function refresh(note) {
    if (busy) { again = true; return; }
    busy = true;
    fetch(window.location.href, { credentials: "same-origin", headers: { "Accept": "text/html", "X-Varplane-Live": "1" } })
      .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
      .then(function (html) {
        var doc = new DOMParser().parseFromString(html, "text/html");
        document.querySelectorAll("[data-live-region]").forEach(function (el) {
          var fresh = doc.getElementById(el.id);
          if (fresh && !el.contains(document.activeElement)) { el.replaceWith(fresh); }
        });
        if (timer && !doc.querySelector("[data-live-poll]")) { clearInterval(timer); timer = 0; }
        var np = doc.querySelector("[data-live-scope]");
        if (np && page) { page.setAttribute("data-generation", np.getAttribute("data-generation")); }
        if (live && note) { live.textContent = note; }
      })
      .catch(function () {})
      .then(function () { busy = false; if (again) { again = false; refresh(""); } });
  }

  function onEvent(ev) {
    var data;
    try { data = JSON.parse(ev.data); } catch (e) { return; }
    if (scope && data.scope !== scope) { return; }
    var gen = Number(data.generation);
    if (scope && gen <= shown) { return; }
    // The project's own records (change requests, policies, principals:
    // the roots the page names, varplane.InternalRoots) are not the
    // user's scopes: they make no banner on the list.
    if (!scope && internal.indexOf(data.scope.split(".")[0]) >= 0) { return; }
    if (!scope) {
      // The stream opens with every head: a row that shows it already is
      // not news.
      var row = document.querySelector('tr[data-scope="' + CSS.escape(data.scope) + '"] .gen');
      if (row && Number(row.textContent) >= gen) { return; }
    }
    if (scope) { shown = gen; }
    refresh("Generation " + gen + " of " + data.scope + " is live" + (ev.type === "no-head" ? " (deactivated)." : "."));
  }

  if (poll) {
    var ms = Number(poll.getAttribute("data-live-poll"));
    if (ms > 0) { timer = setInterval(function () { refresh(""); }, ms); }
    document.addEventListener("submit", function () { clearInterval(timer); busy = true; });
    return;
  }
  if (!window.EventSource) { return; }
  var es = new EventSource(url);
  es.addEventListener("head", onEvent);
  es.addEventListener("no-head", onEvent);
  window.addEventListener("pagehide", function () { es.close(); });
  // A form sent from this page leads to another: stop refreshing this one.
  document.addEventListener("submit", function () { es.close(); busy = true; });
})();
