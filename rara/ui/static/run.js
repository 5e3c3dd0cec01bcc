// A run's page, live: step colours, progress and attempts from the server-sent state; the
// sections below (errors, attempts, artifacts, results) re-rendered by the server when a step
// changes status.
'use strict';
(function () {
  const rara = window.rara;

  // A link to a step's events (or any closed section) opens it.
  const openTarget = (id) => {
    const target = id && document.getElementById(id);
    if (target && target.tagName === 'DETAILS') { target.open = true; target.scrollIntoView(); }
    return !!target;
  };
  window.addEventListener('hashchange', () => openTarget(location.hash.slice(1)));
  openTarget(location.hash.slice(1));

  // The run page's events: read from /runs/<id>/events when the section is opened.
  const events = document.getElementById('events');
  let wanted = null;  // the step whose events a link asked for
  const loadEvents = () => rara.refreshFrom(events.dataset.src, ['#step-events'])
    .then(() => {
      const step = Array.from(document.querySelectorAll('details.step-events'))
        .find((d) => d.dataset.events === wanted);
      if (step) openTarget(step.id);
      wanted = null;
    });
  if (events) {
    events.addEventListener('toggle', () => { if (events.open) loadEvents(); });
    document.addEventListener('click', (e) => {
      const link = e.target.closest && e.target.closest('a.events-link');
      if (!link) return;
      e.preventDefault();
      wanted = link.dataset.events;
      if (events.open) loadEvents(); else events.open = true;
    });
  }

  // The run page's logs: read from /runs/<id>/logs when the section is opened, and again
  // while it is open when the live state says a running step wrote more or a step changed.
  const logs = document.getElementById('logs');
  const loadLogs = rara.coalesced(() => rara.refreshFrom(logs.dataset.src, ['#step-logs']), 300);
  if (logs) logs.addEventListener('toggle', () => { if (logs.open) loadLogs(); });
  let logMark = null;

  const root = document.getElementById('run');
  if (!root) return;
  const runId = root.dataset.run;
  let status = root.dataset.status;

  const index = () => {
    const byKey = new Map();
    document.querySelectorAll('[data-step]').forEach((el) => {
      const key = el.dataset.step;
      if (!byKey.has(key)) byKey.set(key, []);
      byKey.get(key).push(el);
    });
    return byKey;
  };
  let byKey = index();

  // .facts holds #counts: listing both would move the fresh #counts out of the fresh .facts
  // first and leave the Steps line blank.
  // The approvals and the run's actions are left as they are while a reason is being written
  // in one of them, or a confirmation (reject, cancel) is open.
  const writing = (where) => document.querySelector(where + ' details[open]') !== null
    || Array.from(document.querySelectorAll(where + ' textarea'))
      .some((t) => t.value || t === document.activeElement);
  const refresh = rara.coalesced(() => rara.refreshFrom(
    location.pathname + location.search,
    ['table.steps', '[data-refresh]', '.facts', '#dag-reused', '#run-waits']
      .concat(['.run-head .actions', '#approvals'].filter((where) => !writing(where))),
  ).then(() => {
    byKey = index();
    rara.highlightOpen();  // the evidence re-rendered open
    if (window.raraCharts) window.raraCharts();
  }), 300);

  const onState = (state) => {
    let changed = false;
    for (const s of state.steps) {
      const done = s.status === 'succeeded' ? 1 : (s.fraction || 0);
      for (const el of byKey.get(s.key) || []) {
        if (el.tagName.toLowerCase() === 'g') {
          if (!el.classList.contains('st-' + s.status)) { rara.setStatusClass(el, s.status); changed = true; }
          const box = el.querySelector('rect');
          const bar = el.querySelector('.bar');
          if (box && bar) bar.setAttribute('width', String(Math.round(box.getAttribute('width') * done)));
          const title = el.querySelector('title');
          // The first line only: a map step's lines per child stay (the table has them live).
          // What it waits for is the second line while it waits (the state says it).
          if (title) {
            const rest = title.textContent.replace(/^[^\n]*/, '').replace(/^\nwaits [^\n]*/, '');
            title.textContent = s.key + ': ' + s.status + (s.waits ? '\n' + s.waits : '') + rest;
          }
        } else {
          const cell = el.querySelector('[data-field=status]');
          if (cell && cell.textContent !== s.status) {
            cell.textContent = s.status; rara.setStatusClass(cell, s.status); changed = true;
          }
          const attempt = el.querySelector('[data-field=attempt]');
          if (attempt) {
            const text = attempt.textContent;
            attempt.textContent = s.attempt + text.slice(text.indexOf('/'));
          }
          // A map step's bar counts its children: the page's refresh redraws it.
          const bar = el.querySelector('[data-field=fraction]:not([data-map])');
          if (bar) {
            bar.value = done;
            bar.dataset.state = s.status;
            bar.title = Math.round(done * 100) + '%';
          }
        }
      }
    }
    for (const [name, n] of Object.entries(state.run.counts || {})) {
      const cell = document.querySelector('#counts [data-count="' + name + '"]');
      if (cell) cell.textContent = String(n);
    }
    const badge = document.getElementById('run-status');
    // What a waiting run waits for: re-read with the page's parts (its gates are links).
    const waits = document.getElementById('run-waits');
    if (waits && waits.dataset.said !== (state.run.waits || '')) {
      waits.dataset.said = state.run.waits || ''; changed = true;
    }
    if (badge && badge.textContent !== state.run.status) {
      badge.textContent = state.run.status; rara.setStatusClass(badge, state.run.status);
      changed = true;
    }
    if (rara.terminal(state.run.status)) {
      const cancel = document.getElementById('cancel-confirm');
      if (cancel) cancel.remove();
      for (const id of ['pause', 'unpause']) {
        const button = document.getElementById(id);
        if (button) button.closest('form').remove();
      }
    }
    status = state.run.status;
    root.dataset.status = status;
    if (rara.terminal(status)) {
      rara.indicate('ended', status + ': nothing more to follow');
      const live = document.getElementById('live');
      if (live) live.dataset.state = 'ended';
    }
    if (state.charts && window.raraCharts) window.raraCharts.live(state.charts);
    if (changed) refresh();
    if (logs && logs.open && (changed || state.logs !== logMark)) loadLogs();
    logMark = state.logs;
  };

  // "Took" of the run and of its running steps counts on in the page, as took() formats it.
  const took = (seconds) => {
    if (seconds < 60) return seconds.toFixed(2) + 's';
    const minutes = Math.floor(seconds / 60);
    if (minutes < 60) return minutes + 'm' + String(Math.floor(seconds) % 60).padStart(2, '0') + 's';
    return Math.floor(minutes / 60) + 'h' + String(minutes % 60).padStart(2, '0') + 'm';
  };
  setInterval(() => {
    const now = Date.now() - rara.skew;
    for (const el of document.querySelectorAll('.took[data-start]')) {
      el.textContent = took(Math.max(0, now - Date.parse(el.dataset.start)) / 1000);
    }
  }, 1000);

  rara.live('/live/runs/' + runId, '/runs/' + runId + '/state', onState, 3000);
})();
