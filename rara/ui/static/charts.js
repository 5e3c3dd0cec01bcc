// Charts (uPlot) from the JSON the server embedded in #chart-data: x values and one series
// per line, nulls for gaps. Titles and labels are set as text (uPlot uses textContent too).
'use strict';
(function () {
  const palette = ['#2563eb', '#dc2626', '#16a34a', '#9333ea', '#ea580c', '#0891b2',
    '#4d7c0f', '#be185d', '#854d0e', '#334155', '#0f766e', '#7c2d12'];
  // y labels in compact form (1.4M, 0.873): uPlot's default ("1,400,000") is cut to
  // "0,000" by its fixed axis width.
  const compact = new Intl.NumberFormat('en', { notation: 'compact', maximumSignificantDigits: 4 });
  const yAxis = { values: (u, splits) => splits.map((v) => (v == null ? '' : compact.format(v))) };
  window.raraCharts = function () {
    const holder = document.getElementById('charts');
    const source = document.getElementById('chart-data');
    if (!holder || !source || !window.uPlot) return;
    holder.replaceChildren();
    for (const chart of JSON.parse(source.textContent)) {
      const box = document.createElement('figure');
      box.className = 'chart';
      const caption = document.createElement('figcaption');
      caption.textContent = chart.title;
      box.append(caption);
      holder.append(box);
      const series = [{ label: chart.xLabel }].concat(chart.series.map((s, i) => ({
        label: s.label, stroke: palette[i % palette.length], width: 2, spanGaps: true,
        points: { show: chart.x.length < 60, size: 5 },
      })));
      box.raraPlot = new window.uPlot({
        width: Math.min(560, holder.clientWidth || 560), height: 240,
        scales: { x: { time: chart.time } }, series,
        // Runs are counted in whole numbers: no tick at run 1.25.
        axes: [
          chart.time ? {} : { incrs: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000] },
          yAxis,
        ],
      }, [chart.x].concat(chart.series.map((s) => s.values)), box);
    }
  };
  window.raraCharts();
})();
