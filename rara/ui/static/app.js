// rara dashboard: shared helpers. Plain JS, no framework: the pages are server-rendered and
// the live view only recolours them. Text from the server is set with textContent, never HTML.
'use strict';
window.rara = {
  terminal: (s) => s === 'succeeded' || s === 'failed' || s === 'cancelled',
  setStatusClass(el, status) {
    for (const c of Array.from(el.classList)) if (c.startsWith('st-')) el.classList.remove(c);
    el.classList.add('st-' + status);
  },
  // A live stream of states from the server (SSE), or polling `pollUrl` when the stream is
  // closed for good (a proxy that buffers, an old browser).
  live(streamUrl, pollUrl, onState, pollEvery) {
    let timer = null;
    const poll = () => {
      if (pollUrl) fetch(pollUrl).then((r) => r.json()).then(onState).catch(() => {});
      else onState(null);
    };
    const startPolling = () => { if (!timer) timer = setInterval(poll, pollEvery || 3000); };
    if (!window.EventSource) { startPolling(); return { close() { clearInterval(timer); } }; }
    const source = new EventSource(streamUrl);
    source.addEventListener('state', (e) => onState(JSON.parse(e.data)));
    source.onopen = () => {
      document.body.dataset.live = 'open';
      if (timer) { clearInterval(timer); timer = null; }
    };
    source.onerror = () => {
      document.body.dataset.live = 'error';
      if (source.readyState === EventSource.CLOSED) startPolling();
    };
    return { close() { source.close(); clearInterval(timer); } };
  },
  // Replace the elements matching `selectors` with the same ones of a fresh render of this page.
  async refreshFrom(url, selectors) {
    const response = await fetch(url, { headers: { accept: 'text/html' } });
    if (!response.ok) return false;
    const doc = new DOMParser().parseFromString(await response.text(), 'text/html');
    for (const selector of selectors) {
      const fresh = doc.querySelector(selector);
      const old = document.querySelector(selector);
      if (fresh && old) old.replaceWith(document.adoptNode(fresh));
    }
    return true;
  },
};
