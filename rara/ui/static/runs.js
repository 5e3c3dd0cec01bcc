// The runs list's first page follows new runs and status changes live.
'use strict';
(function () {
  const table = document.getElementById('runs-table');
  if (!table || !table.dataset.live) return;
  const refresh = window.rara.coalesced(
    () => window.rara.refreshFrom(location.pathname + location.search, ['#runs-table']), 200);
  window.rara.live(table.dataset.live, null, refresh, 5000);
})();
