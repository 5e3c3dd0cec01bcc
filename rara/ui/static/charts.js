// Charts (uPlot) from the JSON the server embedded in #chart-data: x values and one series
// per line, nulls for gaps, a colour per attempt, marks where an attempt resumed. The run
// page's live state sends the running steps' charts again as they grow (raraCharts.live):
// those replace the page's charts of the same steps, and only a chart whose data changed is
// drawn again. Titles and labels are set as text (uPlot uses textContent too).
'use strict';
(function () {
  // Result charts' lines (a series per field): none of them the failure red.
  const palette = ['#2563eb', '#16a34a', '#9333ea', '#0891b2', '#4d7c0f', '#334155',
    '#0f766e', '#854d0e', '#4f46e5', '#ca8a04', '#be185d', '#ea580c'];
  // y labels in compact form (1.4M, 0.873): uPlot's default ("1,400,000") is cut to
  // "0,000" by its fixed axis width.
  const compact = new Intl.NumberFormat('en', { notation: 'compact', maximumSignificantDigits: 4 });
  // The legend's values as the page's tables show numbers (rara.ui.numbers): 4 significant
  // digits, separators, whole numbers whole; byte counts (the server marks them) in KiB/MiB.
  const digits = new Intl.NumberFormat('en', { maximumSignificantDigits: 4 });
  const whole = new Intl.NumberFormat('en', { maximumFractionDigits: 0 });
  const number = (v) => (Number.isInteger(v) || Math.abs(v) >= 1e4 ? whole : digits).format(v);
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
  const bytes = (v) => {
    let amount = v;
    let unit = 0;
    while (Math.abs(amount) >= (unit ? 999.5 : 1024) && unit < units.length - 1) {
      amount /= 1024; unit += 1;
    }
    return (unit ? Number(amount.toPrecision(3)) : Math.round(amount)) + ' ' + units[unit];
  };
  const yAxisOf = (chart) => ({
    values: (u, splits) => splits.map((v) => {
      if (v == null) return '';
      return chart.unit === 'bytes' ? bytes(v) : compact.format(v);
    }),
    size: chart.unit === 'bytes' ? 70 : 50,
  });
  const utc = (seconds) => new Date(seconds * 1e3).toISOString().slice(0, 19).replace('T', ' ');
  let shown = [];  // the charts on the page, in order
  const drawn = new Map();  // chart id -> { json, figure }

  // Dashed vertical lines where an attempt resumed, labelled.
  const marksPlugin = (marks) => ({
    hooks: {
      draw: [(u) => {
        const ctx = u.ctx;
        ctx.save();
        ctx.strokeStyle = '#6b7280';
        ctx.fillStyle = '#374151';
        ctx.setLineDash([4, 4]);
        ctx.font = '11px system-ui, sans-serif';
        for (const mark of marks) {
          const x = Math.round(u.valToPos(mark.x, 'x', true));
          ctx.beginPath();
          ctx.moveTo(x, u.bbox.top);
          ctx.lineTo(x, u.bbox.top + u.bbox.height);
          ctx.stroke();
          ctx.fillText(mark.label, x + 4, u.bbox.top + 12);
        }
        ctx.restore();
      }],
    },
  });

  const draw = (chart, width) => {
    const box = document.createElement('figure');
    box.className = 'chart';
    box.dataset.chart = chart.id || chart.title;
    const caption = document.createElement('figcaption');
    caption.textContent = chart.title;
    box.append(caption);
    const series = [{ label: chart.xLabel }].concat(chart.series.map((s, i) => ({
      label: s.label, stroke: s.color || palette[i % palette.length], width: 2, spanGaps: true,
      dash: s.dash && s.dash.length ? s.dash : undefined,
      points: { show: chart.x.length < 60, size: 5 },
      value: (u, v) => (v == null ? '' : (chart.unit === 'bytes' ? bytes(v) : number(v))),
    })));
    if (chart.time) series[0].value = (u, v) => (v == null ? '' : utc(v) + ' UTC');
    const plot = new window.uPlot({
      width, height: 240,
      scales: { x: { time: chart.time } }, series,
      plugins: chart.marks && chart.marks.length ? [marksPlugin(chart.marks)] : [],
      // The dashboard's one clock: UTC, 24-hour, on the axis and in the legend.
      tzDate: (ts) => window.uPlot.tzDate(new Date(ts * 1e3), 'Etc/UTC'),
      // Runs and training steps are counted in whole numbers: no tick at run 1.25.
      axes: chart.time
        ? [{ values: (u, ticks) => ticks.map((t) => utc(t).slice(11)) }, yAxisOf(chart)]
        : [{ incrs: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000] },
          yAxisOf(chart)],
    }, [chart.x].concat(chart.series.map((s) => s.values)), box);
    box.dataset.points = String(chart.x.length);
    box.dataset.marks = (chart.marks || []).map((m) => m.label).join('; ');
    box.uplot = plot;
    return box;
  };

  const render = () => {
    const holder = document.getElementById('charts');
    if (!holder || !window.uPlot) return;
    const width = Math.min(560, holder.clientWidth || 560);
    const figures = [];
    const keep = new Set();
    for (const chart of shown) {
      const id = chart.id || chart.title;
      const json = JSON.stringify(chart);
      let known = drawn.get(id);
      if (!known || known.json !== json) {
        if (known) known.figure.uplot.destroy();
        known = { json, figure: draw(chart, width) };
        drawn.set(id, known);
      }
      keep.add(id);
      figures.push(known.figure);
    }
    for (const [id, known] of drawn) {
      if (!keep.has(id)) { known.figure.uplot.destroy(); drawn.delete(id); }
    }
    holder.replaceChildren(...figures);
    const none = document.getElementById('no-metrics');
    if (none) none.hidden = figures.length > 0 || !!document.getElementById('single-values');
  };

  // Everything again from the page's #chart-data (a load, or a re-rendered section).
  window.raraCharts = function () {
    const source = document.getElementById('chart-data');
    shown = source ? JSON.parse(source.textContent) : [];
    drawn.clear();
    render();
  };
  // The running steps' charts from the live state: they replace the ones of those steps.
  window.raraCharts.live = function (charts) {
    const fresh = new Map(charts.map((c) => [c.id, c]));
    const steps = new Set(charts.map((c) => c.key));
    const merged = [];
    for (const chart of shown) {
      if (fresh.has(chart.id)) { merged.push(fresh.get(chart.id)); fresh.delete(chart.id); }
      else if (!steps.has(chart.key)) merged.push(chart);
    }
    merged.push(...fresh.values());
    // The primary metrics (loss) first, as the server orders them; otherwise as they were.
    shown = merged.filter((c) => c.primary).concat(merged.filter((c) => !c.primary));
    render();
  };
  window.raraCharts();
})();
