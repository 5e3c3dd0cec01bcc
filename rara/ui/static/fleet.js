// The Fleet page, live: the hub sends its three tables (rows of {text, cls} cells, formatted on the
// server) whenever they change; the rows are rebuilt from them, text set as text.
'use strict';
(function () {
  const root = document.getElementById('fleet');
  if (!root || !root.dataset.live) return;
  const cell = (c) => {
    const td = document.createElement('td');
    if (c.cls.startsWith('st')) {
      const badge = document.createElement('span');
      badge.className = c.cls;
      badge.textContent = c.text;
      td.append(badge);
    } else {
      if (c.cls) td.className = c.cls;
      td.textContent = c.text;
    }
    return td;
  };
  const onState = (state) => {
    for (const body of root.querySelectorAll('tbody[data-table]')) {
      const rows = state[body.dataset.table] || [];
      const fresh = rows.map((row) => {
        const tr = document.createElement('tr');
        tr.append(...row.map(cell));
        return tr;
      });
      if (!fresh.length) {
        const tr = document.createElement('tr');
        const td = cell({ text: body.dataset.empty, cls: 'muted' });
        td.colSpan = Number(body.dataset.columns);
        tr.append(td);
        fresh.push(tr);
      }
      body.replaceChildren(...fresh);
    }
    root.dataset.updated = String(Date.now());
  };
  // Without server-sent events (polling, state null): the tables of a fresh render.
  const tables = ['backlog', 'workers', 'executors'].map((t) => `tbody[data-table=${t}]`);
  window.rara.live(root.dataset.live, null, (state) => {
    if (state) onState(state);
    else window.rara.refreshFrom(location.pathname, tables);
  }, 5000);
})();
