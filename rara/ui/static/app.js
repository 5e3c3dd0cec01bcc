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
    const startPolling = () => {
      if (!timer) timer = setInterval(poll, pollEvery || 3000);
      this.indicate('live', 'live (polling every ' + (pollEvery || 3000) / 1000 + ' s)');
    };
    if (!window.EventSource) { startPolling(); return { close() { clearInterval(timer); } }; }
    const source = new EventSource(streamUrl);
    source.addEventListener('state', (e) => onState(JSON.parse(e.data)));
    source.onopen = () => {
      document.body.dataset.live = 'open';
      this.indicate('live', 'live');
      if (timer) { clearInterval(timer); timer = null; }
    };
    source.onerror = () => {
      document.body.dataset.live = 'error';
      this.indicate('paused', 'paused: reconnecting');
      if (source.readyState === EventSource.CLOSED) startPolling();
    };
    return { close() { source.close(); clearInterval(timer); } };
  },
  // The page's live/paused badge (#live), unless the page said it has nothing more to follow.
  indicate(state, text) {
    const badge = document.getElementById('live');
    if (!badge || badge.dataset.state === 'ended') return;
    badge.dataset.state = state;
    badge.textContent = text;
  },
  // Milliseconds the browser's clock is ahead of the server's (the page's data-now).
  skew: (() => {
    const stamped = document.querySelector('[data-now]');
    return stamped ? Date.now() - Date.parse(stamped.dataset.now) : 0;
  })(),
  // "12 s", "3 min", "2 h", "4 d": a duration in the largest unit that fits.
  relative(seconds) {
    const s = Math.max(0, Math.round(seconds));
    if (s < 60) return s + ' s';
    if (s < 3600) return Math.floor(s / 60) + ' min';
    if (s < 86400) return Math.floor(s / 3600) + ' h';
    return Math.floor(s / 86400) + ' d';
  },
  // Every <time data-rel> (UTC, from the server) gets its relative time, kept current: "3 min
  // ago", or "in 3 min" for an instant still to come (a schedule's next tick).
  tickTimes() {
    const now = Date.now() - window.rara.skew;
    for (const el of document.querySelectorAll('time[data-rel]')) {
      let rel = el.querySelector('.rel');
      if (!rel) { rel = document.createElement('span'); rel.className = 'rel'; el.append(rel); }
      const ago = (now - Date.parse(el.dateTime)) / 1000;
      rel.textContent = ' · ' + (ago <= -1 ? 'in ' + window.rara.relative(-ago) : window.rara.relative(ago) + ' ago');
    }
  },
  // `task` (returning a promise) run `delay` ms after the first call, calls in that wait joined
  // to it; a call while it runs starts one more run after it ends, so the last change a
  // live stream reports is never left out of the page.
  coalesced(task, delay) {
    let state = 'idle';  // 'waiting' | 'running' | 'again' (running, one more run asked)
    const run = () => {
      state = 'running';
      Promise.resolve().then(task).catch(() => {}).finally(() => {
        const again = state === 'again';
        state = 'idle';
        if (again) call();
      });
    };
    const call = () => {
      if (state === 'idle') { state = 'waiting'; setTimeout(run, delay); }
      else if (state === 'running') state = 'again';
    };
    return call;
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
window.rara.tickTimes();
setInterval(window.rara.tickTimes, 1000);

// JSON (a result, an error's details, a schedule's input) indented and highlighted when its
// section is opened: the server sends it as text, compact; its tokens are kept as written (no
// parse: a big integer keeps its digits) and become spans, set with textContent.
(function () {
  const TOKEN = /("(?:\\.|[^"\\])*")|(-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)|(true|false)|(null)|([{}[\],:])/g;
  const highlight = (pre) => {
    if (pre.dataset.highlighted) return;
    const tokens = Array.from(pre.textContent.matchAll(TOKEN));
    const out = [];
    let depth = 0;
    const put = (cls, text) => {
      if (!cls) { out.push(document.createTextNode(text)); return; }
      const span = document.createElement('span');
      span.className = cls;
      span.textContent = text;
      out.push(span);
    };
    const newline = () => put(null, '\n' + '  '.repeat(depth));
    tokens.forEach((m, i) => {
      const before = tokens[i - 1] ? tokens[i - 1][0] : '';
      const after = tokens[i + 1] ? tokens[i + 1][0] : '';
      if (m[1]) put(after === ':' ? 'j-key' : 'j-str', m[1]);
      else if (m[2]) put('j-num', m[2]);
      else if (m[3]) put('j-bool', m[3]);
      else if (m[4]) put('j-null', m[4]);
      else if (m[5] === '{' || m[5] === '[') {
        put(null, m[5]);
        if (after !== '}' && after !== ']') { depth += 1; newline(); }
      } else if (m[5] === '}' || m[5] === ']') {
        if (before !== '{' && before !== '[') { depth -= 1; newline(); }
        put(null, m[5]);
      } else if (m[5] === ',') { put(null, ','); newline(); }
      else put(null, ': ');
    });
    pre.replaceChildren(...out);
    pre.dataset.highlighted = '1';
  };
  window.rara.highlightOpen = () => document.querySelectorAll('details[open] pre[data-highlight]').forEach(highlight);
  document.addEventListener('toggle', (e) => { if (e.target.open) window.rara.highlightOpen(); }, true);
  window.rara.highlightOpen();
})();
