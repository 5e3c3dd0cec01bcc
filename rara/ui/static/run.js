// A run's page, live: step colours, progress and attempts from the server-sent state; the
// sections below (errors, attempts, artifacts, results) re-rendered by the server when a step
// changes status.
'use strict';
(function () {
  const root = document.getElementById('run');
  if (!root) return;
  const rara = window.rara;
  const runId = root.dataset.run;
  let status = root.dataset.status;
  let refreshing = null;

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

  const refresh = () => {
    if (refreshing) return;
    refreshing = setTimeout(() => {
      rara.refreshFrom(location.pathname + location.search, ['#counts', 'table.steps', '[data-refresh]', '.facts', '.run-head .actions'])
        .then(() => { byKey = index(); if (window.raraCharts) window.raraCharts(); })
        .finally(() => { refreshing = null; });
    }, 300);
  };

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
          if (title) title.textContent = s.key + ': ' + s.status + title.textContent.replace(/^[^\n]*/, '');
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
          const bar = el.querySelector('[data-field=fraction]');
          if (bar) bar.value = done;
        }
      }
    }
    const badge = document.getElementById('run-status');
    if (badge && badge.textContent !== state.run.status) {
      badge.textContent = state.run.status; rara.setStatusClass(badge, state.run.status);
      changed = true;
    }
    if (rara.terminal(state.run.status)) {
      const cancel = document.getElementById('cancel');
      if (cancel) cancel.closest('form').remove();
    }
    status = state.run.status;
    root.dataset.status = status;
    if (changed) refresh();
  };

  rara.live('/live/runs/' + runId, '/runs/' + runId + '/state', onState, 3000);
})();
