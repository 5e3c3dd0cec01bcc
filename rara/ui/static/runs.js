// The runs list's first page follows new runs and status changes live.
'use strict';
(function () {
  const table = document.getElementById('runs-table');
  if (!table || !table.dataset.live) return;
  let pending = false;
  window.rara.live(table.dataset.live, null, () => {
    if (pending) return;
    pending = true;
    setTimeout(() => {
      window.rara.refreshFrom(location.pathname + location.search, ['#runs-table'])
        .finally(() => { pending = false; });
    }, 200);
  }, 5000);
})();
