// Live view: follows execution events over server-sent events and says
// when the page is out of date. It only ever writes text (textContent),
// never HTML. Without JavaScript the pages work as they are.
(function () {
  "use strict";
  // Relative times ("3.1s ago", "in 12s") count on from when the page
  // was read (data-read-at, the database's clock as the console measured
  // it; the browser's own may be off), on every page. A time that was ahead when the page was read and
  // has passed since says so instead of counting on: leases are renewed
  // and expire without an event, so the page cannot know which it was
  // (and no longer says "alive").
  // reltime:begin
  // ago says how far a time ms milliseconds before now is (negative: ahead
  // of now), in the command's wording (internal/reltime, rule for rule):
  // "in 3.1s", "42s ago", "1m05s ago", "2h03m ago", "3d ago", "just now".
  var ago = function (ms) {
    var pre = "", suf = " ago";
    if (ms < 0) { ms = -ms; pre = "in "; suf = ""; }
    ms = Math.floor(ms);
    if (ms < 100) { return "just now"; }
    var tenths = Math.floor(ms / 100), s = Math.floor(ms / 1000), m = Math.floor(s / 60), h = Math.floor(s / 3600);
    var two = function (n) { return (n < 10 ? "0" : "") + n; };
    var x;
    if (tenths < 100) { x = Math.floor(tenths / 10) + "." + (tenths % 10) + "s"; }
    else if (s < 60) { x = s + "s"; }
    else if (m < 60) { x = m + "m" + two(s % 60) + "s"; }
    else if (h < 48) { x = h + "h" + two(m % 60) + "m"; }
    else { x = Math.floor(h / 24) + "d"; }
    return pre + x + suf;
  };
  // reltime:end
  // Time is measured as elapsed since the page was read, never read off a
  // wall clock: the browser's may be minutes off, and be stepped while
  // the page is open. Elapsed is the larger of what the monotonic clock
  // (performance.now: no step moves it, but it may stand still while the
  // machine sleeps) and the wall clock (Date.now: moves on over a sleep)
  // have counted: a lease then never looks alive for longer than it is.
  var mono0 = window.performance && performance.now ? performance.now() : null, wall0 = Date.now();
  var elapsed = function () {
    var w = Date.now() - wall0;
    return mono0 === null ? w : Math.max(performance.now() - mono0, w);
  };
  var readAt = Number(document.body.getAttribute("data-read-at"));
  var ages = document.querySelectorAll(".age[data-t]");
  if (readAt && ages.length) {
    var tick = function () {
      var now = readAt + elapsed();
      for (var i = 0; i < ages.length; i++) {
        var e = ages[i], t = Date.parse(e.getAttribute("data-t"));
        if (isNaN(t)) { continue; }
        if (t > readAt && t <= now && !e.hasAttribute("data-past")) {
          e.textContent = "passed since this page was read";
          e.className = "age stale";
          e.title = "This time was ahead when the page was read (" + new Date(readAt).toISOString().replace("T", " ") +
            "): it may have been renewed since, or it expired. Reload for the current state.";
          var alive = e.parentNode.querySelector(".lease-alive");
          if (alive) { alive.hidden = true; }
          continue;
        }
        e.textContent = ago(now - t);
      }
    };
    window.setInterval(tick, 1000);
  }
  // A running key (a row, or a key page, with data-lease-*) whose lease
  // expires: its executor died, and nothing writes an event then, so the
  // live view cannot announce it. Once the lease time it had left when
  // the page was read (data-lease-left-ms, on the database clock) has
  // passed (elapsed: no clock's offset counts, neither the browser's nor
  // the console's), the page reads the key's state again (lease-state):
  // renewed, it waits for the time then left; expired, the row is marked
  // as a reload would mark it (uncertain, handed back, rerun pending). A
  // change that writes an event (completed, reconciled) is the live
  // view's to count: the row is left as read. When the counts of the keys
  // needing an operator change (attention), every running row is read
  // again at once.
  var recheckLeases = function () {};
  var leased = document.querySelectorAll("[data-lease-left-ms]");
  if (leased.length && window.fetch) {
    var watch = [];
    for (var li = 0; li < leased.length; li++) {
      var left = Number(leased[li].getAttribute("data-lease-left-ms"));
      watch.push({el: leased[li], due: isNaN(left) ? 0 : left, next: 0, busy: false});
    }
    var mark = function (w, s) {
      var el = w.el;
      var cell = el.classList.contains("state-cell") ? el : el.querySelector(".state-cell");
      if (el.tagName === "TR" && s.uncertain) { el.classList.add("uncertain"); }
      if (cell) {
        cell.textContent = "";
        var b = document.createElement("span");
        b.className = s.badge.class;
        b.textContent = s.badge.text;
        if (s.badge.title) { b.title = s.badge.title; }
        cell.appendChild(b);
        if (s.note && cell.id === "key-state") {
          var n = document.createElement("small");
          n.textContent = " " + s.note;
          cell.appendChild(n);
        }
        var at = new Date(s.at);
        cell.title = "Its lease expired after this page was read: read again at " +
          (isNaN(at) ? s.at : at.toISOString().replace("T", " ")) + ". Reload for the actions it now needs.";
        cell.classList.add("lease-expired");
      }
      // Hard expiry, on a key page, as a reload shows it for a key handed
      // back (hard_past): none, and whose the kept one was.
      var hard = el.tagName === "TR" ? null : document.getElementById("key-hard");
      if (hard && s.hard_past) {
        hard.textContent = "none ";
        var hn = document.createElement("small");
        hn.textContent = s.hard_past;
        hard.appendChild(hn);
      }
      // Since, as a reload shows it: the lease's end (lease-state's
      // since), a time past when read again that counts on (data-past)
      // rather than saying it passed since the page was read.
      var since = el.tagName === "TR" ? el.querySelector(".since") : document.getElementById("key-since");
      var st = s.since ? new Date(s.since) : null;
      if (since && st && !isNaN(st) && since.firstChild && since.firstChild.nodeType === 3) {
        var text = st.toISOString().replace("T", " ");
        since.firstChild.nodeValue = el.tagName === "TR" ? text : text + " ";
        if (el.tagName === "TR") { since.title = text; }
        var age = since.querySelector(".age");
        if (age) {
          age.setAttribute("data-t", s.since);
          age.setAttribute("data-past", "");
          age.className = "age";
          age.title = "";
          age.textContent = ago(Math.max(0, Date.parse(s.at) - st.getTime()));
        }
      }
    };
    var check = function (w, force) {
      var now = elapsed();
      if (w.busy || w.done || now < w.next) { return; }
      if (!force && now < w.due) { return; }
      w.busy = true;
      var q = "lease-state?ns=" + encodeURIComponent(w.el.getAttribute("data-lease-ns")) +
        "&key=" + encodeURIComponent(w.el.getAttribute("data-lease-key"));
      window.fetch(q, {credentials: "same-origin", cache: "no-store"}).then(function (r) {
        if (r.status === 404 || r.status === 400) { w.done = true; return null; }
        if (!r.ok) { throw new Error(String(r.status)); }
        return r.json();
      }).then(function (s) {
        w.busy = false;
        if (!s) { return; }
        if (String(s.token) !== w.el.getAttribute("data-lease-token") || (s.state !== "executing" && s.state !== "claimed")) {
          w.done = true; // moved on with an event: the live view counts it
          return;
        }
        if (s.alive) {
          if (s.lease_expires_at) { w.el.setAttribute("data-lease-expires", s.lease_expires_at); }
          w.due = elapsed() + (Number(s.lease_left_ms) || 0);
          w.next = 0;
          return;
        }
        w.done = true;
        mark(w, s);
      }).catch(function () {
        w.busy = false;
        w.next = elapsed() + 5000; // the database or the console did not answer: later
      });
    };
    window.setInterval(function () {
      for (var i = 0; i < watch.length; i++) { check(watch[i], false); }
    }, 1000);
    recheckLeases = function () {
      for (var i = 0; i < watch.length; i++) { check(watch[i], true); }
    };
  }
  var src = document.body.getAttribute("data-live");
  if (!src || !window.EventSource) { return; }
  var status = document.getElementById("live-status");
  var banner = document.getElementById("live-banner");
  var log = document.getElementById("live");
  var list = document.getElementById("live-events");
  // changed counts the changes made after the page was read; whileRead
  // those made while it was read (the server marks them while_read: the
  // page may show them already), which are not counted as changes since
  // it was loaded.
  var changed = 0, whileRead = 0;
  // note: the page's "As read at" note; with the live view following, it
  // says what the view does (the rows stay as read), and without it, that
  // the page does not update itself.
  var noteStatic = document.getElementById("read-at-static");
  var noteLive = document.getElementById("read-at-live");
  function following(on) {
    if (noteStatic && noteLive) { noteStatic.hidden = on; noteLive.hidden = !on; }
  }
  // waitDB: the page was read while the database did not answer (the
  // server marks only pages read with GET): it shows nothing current, so
  // once the stream reads the events again it reloads itself.
  var waitDB = document.body.hasAttribute("data-wait-db");
  var es = new EventSource(src);
  // say sets the status: what the page does now, never more.
  function say(text, kind, title) {
    status.hidden = false;
    status.className = "live" + (kind ? " " + kind : "");
    status.textContent = text;
    status.title = title || "";
  }
  // stopped: the browser will not reconnect. The page no longer updates:
  // say so, why, and offer to reload it.
  function stopped(why) {
    es.close();
    following(false);
    say("× live view stopped" + (why ? ": " + why : "") + ". This page no longer updates: reload it. ", "stopped");
    var r = document.createElement("a");
    r.href = window.location.href;
    r.textContent = "Reload";
    status.appendChild(r);
  }
  // Open is not live yet: the server says "live" (a status event) once
  // its follower reads the events.
  es.onopen = function () { say("○ connecting", "paused"); };
  es.onerror = function () {
    // CLOSED: the server answered a reconnection with an error (not a
    // stream); the browser does not try again.
    if (es.readyState === EventSource.CLOSED) {
      stopped("the server did not take the stream back");
      return;
    }
    say("○ reconnecting", "paused");
  };
  // The server says whether it follows the events now: while the database
  // does not answer it retries, and catches up once it does; it says live
  // again only once it reads the events again.
  es.addEventListener("status", function (m) {
    var s;
    try { s = JSON.parse(m.data); } catch (e) { return; }
    if (s.live && waitDB) {
      es.close();
      say("● the database answers again: reloading this page…");
      window.location.reload();
    } else if (s.live) {
      following(true);
      say("● live");
    } else if (waitDB) {
      say("○ waiting for the database: this page reloads by itself once it answers.",
        "paused", s.detail ? "The database: " + s.detail : "");
    } else {
      say("○ live view paused: the database does not answer. It resumes by itself, with nothing missed.",
        "paused", s.detail ? "The database: " + s.detail : "");
    }
  });
  es.addEventListener("execution", function (m) {
    var ev;
    try { ev = JSON.parse(m.data); } catch (e) { return; }
    log.hidden = false;
    var li = document.createElement("li");
    var a = document.createElement("a");
    a.href = ev.link;
    a.textContent = ev.key;
    // UTC to the millisecond, zone written, as the page writes its times.
    var at = new Date(ev.at);
    at = isNaN(at) ? ev.at : at.toISOString().replace("T", " ");
    li.appendChild(document.createTextNode(at + "  #" + ev.id + "  " + ev.type + " → " + ev.state + "  "));
    li.appendChild(a);
    li.appendChild(document.createTextNode("  (" + ev.namespace + ", token " + ev.token + ")"));
    list.insertBefore(li, list.firstChild);
    while (list.children.length > 100) { list.removeChild(list.lastChild); }
    if (ev.while_read) { whileRead++; } else { changed++; }
    var text = "";
    if (changed > 0) {
      text += changed + " change" + (changed === 1 ? "" : "s") + " since this page was loaded. ";
    }
    if (whileRead > 0) {
      text += whileRead + " change" + (whileRead === 1 ? " was" : "s were") + " made while it was read, and may not be shown. ";
    }
    banner.hidden = false;
    banner.textContent = "";
    banner.appendChild(document.createTextNode(text));
    var r = document.createElement("a");
    r.href = window.location.href;
    r.textContent = "Reload";
    banner.appendChild(r);
  });
  // The counts at the top of the page (what needs an operator), as read
  // with it; null when they could not be read. The server sends the
  // counts every few seconds when they change: a key becomes uncertain
  // when its lease expires, one rerun pending needs an operator once its
  // lease ended long enough ago (rerun_stale), and one reconciling once it
  // began long enough ago (reconciling_stale), with no event to announce
  // any of them.
  var attention = document.getElementById("attention-banner");
  var pageCounts = (function () {
    if (document.getElementById("counts-db-down") || !document.querySelector("#uncertain-counts .ok, #uncertain-counts [data-count]")) {
      return null;
    }
    var c = {uncertain: {}, reconciling: {}, result_lost: {}, rerun_stale: {}, reconciling_stale: {}};
    var kinds = [["uncertain", "data-ns"], ["reconciling", "data-reconciling-ns"], ["result_lost", "data-result-lost-ns"],
      ["rerun_stale", "data-rerun-stale-ns"], ["reconciling_stale", "data-reconciling-stale-ns"]];
    for (var i = 0; i < kinds.length; i++) {
      var els = document.querySelectorAll("#uncertain-counts [" + kinds[i][1] + "][data-count]");
      for (var j = 0; j < els.length; j++) {
        c[kinds[i][0]][els[j].getAttribute(kinds[i][1])] = Number(els[j].getAttribute("data-count"));
      }
    }
    return c;
  })();
  // sameCounts compares the page's counts a with the server's b; a kind
  // b lacks (the server could not read it this time) is not compared.
  function sameCounts(a, b) {
    var ks = ["uncertain", "reconciling", "result_lost", "rerun_stale", "reconciling_stale"];
    for (var i = 0; i < ks.length; i++) {
      if (!b[ks[i]]) { continue; }
      var x = a[ks[i]] || {}, y = b[ks[i]] || {}, n;
      for (n in x) { if (x[n] !== y[n]) { return false; } }
      for (n in y) { if (x[n] !== y[n]) { return false; } }
    }
    return true;
  }
  es.addEventListener("attention", function (m) {
    var a;
    try { a = JSON.parse(m.data); } catch (e) { return; }
    recheckLeases();
    if (!attention || !pageCounts || !a.counts) { return; }
    if (sameCounts(pageCounts, a.counts)) {
      attention.hidden = true;
      return;
    }
    var names = {uncertain: "uncertain", reconciling: "reconciling",
      reconciling_stale: "reconciling, needs an operator (for more than " + (a.reconciling_after || "the threshold") + ")",
      result_lost: "result not stored",
      rerun_stale: "rerun pending, needs an operator (for more than " + (a.rerun_after || "the threshold") + ")"};
    var parts = [];
    for (var k in names) {
      if ((k === "rerun_stale" || k === "reconciling_stale") && !a.counts[k]) { continue; }
      var c = a.counts[k] || {}, list = [];
      for (var n in c) { list.push(n + ": " + c[n]); }
      list.sort();
      parts.push(names[k] + " " + (list.length ? list.join(", ") : "none"));
    }
    var at = new Date(a.at);
    at = isNaN(at) ? a.at : at.toISOString().replace("T", " ");
    attention.hidden = false;
    attention.textContent = "";
    attention.appendChild(document.createTextNode("The keys that need an operator have changed since this page was read. As of " + at +
      ": " + parts.join("; ") + ". "));
    var r = document.createElement("a");
    r.href = window.location.href;
    r.textContent = "Reload";
    attention.appendChild(r);
  });
  es.addEventListener("failure", function (m) {
    var why;
    try { why = JSON.parse(m.data); } catch (e) { why = m.data; }
    stopped(typeof why === "string" ? why : "");
  });
})();
