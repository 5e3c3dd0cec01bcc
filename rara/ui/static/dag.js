// The steps' graph (drawn by the server, rara.ui.dag) scaled to its box: fitted to the box's
// width when the page opens (never below half size, where its labels stop being legible; a
// wider graph scrolls), zoomed by the buttons or Ctrl + wheel around the pointer, panned by
// dragging. The step that needs a look (failed first, then running, then waiting) is scrolled
// into the box. Without this script CSS alone fits the graph to the box's width.
'use strict';
(function () {
  const LEGIBLE = 0.5;  // the smallest scale the page opens at
  const MIN = 0.1;
  const MAX = 3;
  const FACTOR = 1.25;
  const NOTICED = ['st-failed', 'st-running', 'st-waiting'];

  const setup = (wrap) => {
    const view = wrap.querySelector('.dag-view');
    const svg = view && view.querySelector('svg.dag');
    if (!svg) return;
    const width = Number(svg.getAttribute('width'));
    const height = Number(svg.getAttribute('height'));
    let scale = 1;
    let chosen = false;  // the reader zoomed: a resize keeps their scale

    const clamp = (s) => Math.min(MAX, Math.max(MIN, s));
    // Zoom to ``next`` keeping the graph's point under (x, y) of the box where it is.
    const zoom = (next, x = view.clientWidth / 2, y = view.clientHeight / 2) => {
      next = clamp(next);
      const gx = (view.scrollLeft + x) / scale;
      const gy = (view.scrollTop + y) / scale;
      scale = next;
      svg.style.width = width * scale + 'px';
      svg.style.height = height * scale + 'px';
      svg.style.maxWidth = 'none';
      view.scrollLeft = gx * scale - x;
      view.scrollTop = gy * scale - y;
      wrap.dataset.scale = scale.toFixed(3);
    };
    // The box's room inside its padding.
    const room = () => {
      const style = getComputedStyle(view);
      const across = parseFloat(style.paddingLeft) + parseFloat(style.paddingRight);
      const down = parseFloat(style.paddingTop) + parseFloat(style.paddingBottom);
      const tall = parseFloat(style.maxHeight) || view.clientHeight;
      return { wide: view.clientWidth - across, tall: tall - down };
    };
    const fitWidth = () => Math.min(1, Math.max(LEGIBLE, room().wide / width));
    const fitAll = () => Math.min(1, room().wide / width, room().tall / height);

    // The first step in need of a look, centred in the box when any part of it is outside.
    const reveal = () => {
      const node = NOTICED.map((c) => svg.querySelector('g.node.' + c)).find(Boolean);
      if (!node) return;
      const box = node.getBoundingClientRect();
      const frame = view.getBoundingClientRect();
      if (box.left >= frame.left && box.right <= frame.right
        && box.top >= frame.top && box.bottom <= frame.bottom) return;
      view.scrollLeft += box.left + box.width / 2 - (frame.left + frame.width / 2);
      view.scrollTop += box.top + box.height / 2 - (frame.top + frame.height / 2);
    };

    wrap.querySelector('.dag-tools').hidden = false;
    wrap.addEventListener('click', (e) => {
      const button = e.target.closest && e.target.closest('button[data-zoom]');
      if (!button) return;
      chosen = true;
      const how = button.dataset.zoom;
      if (how === 'in') zoom(scale * FACTOR);
      else if (how === 'out') zoom(scale / FACTOR);
      else if (how === 'fit') zoom(fitAll(), 0, 0);
      else zoom(1);
    });
    view.addEventListener('wheel', (e) => {
      if (!e.ctrlKey && !e.metaKey) return;  // a plain wheel scrolls the page, as everywhere
      e.preventDefault();
      chosen = true;
      const frame = view.getBoundingClientRect();
      zoom(scale * (e.deltaY < 0 ? FACTOR : 1 / FACTOR), e.clientX - frame.left, e.clientY - frame.top);
    }, { passive: false });

    // Drag to pan; a drag is not a click on the node it started on.
    let drag = null;
    view.addEventListener('pointerdown', (e) => {
      if (e.button !== 0) return;
      drag = { x: e.clientX, y: e.clientY, left: view.scrollLeft, top: view.scrollTop, moved: false };
    });
    window.addEventListener('pointermove', (e) => {
      if (!drag) return;
      const dx = e.clientX - drag.x;
      const dy = e.clientY - drag.y;
      if (!drag.moved && Math.abs(dx) + Math.abs(dy) < 5) return;
      drag.moved = true;
      view.classList.add('dragging');
      view.scrollLeft = drag.left - dx;
      view.scrollTop = drag.top - dy;
    });
    let dragged = false;  // the click that ends a drag comes right after its pointerup
    view.addEventListener('click', (e) => {
      if (dragged) { e.preventDefault(); e.stopPropagation(); }
    }, { capture: true });
    window.addEventListener('pointerup', () => {
      if (drag && drag.moved) { dragged = true; setTimeout(() => { dragged = false; }, 0); }
      drag = null;
      view.classList.remove('dragging');
    });
    view.addEventListener('dragstart', (e) => e.preventDefault());  // a link's own drag
    window.addEventListener('resize', () => { if (!chosen) zoom(fitWidth(), 0, 0); });

    zoom(fitWidth(), 0, 0);
    reveal();
  };

  document.querySelectorAll('[data-dag]').forEach(setup);
})();
