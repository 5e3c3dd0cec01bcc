// A list that follows its changes live: the runs list's first page (new runs, status
// changes) and the approvals page (gates that begin to wait, decisions, deadlines). On a
// change of its topic's state the table is re-rendered from the page as the server has it.
'use strict';
(function () {
  for (const id of ['runs-table', 'approvals-table']) {
    const table = document.getElementById(id);
    if (!table || !table.dataset.live) continue;
    const refresh = window.rara.coalesced(
      () => window.rara.refreshFrom(location.pathname + location.search, ['#' + id]), 200);
    window.rara.live(table.dataset.live, null, refresh, 5000);
  }
})();
