// Charts (uPlot) from the JSON the server embedded in #chart-data: x values and one series
// per line, nulls for gaps. Titles and labels are set as text (uPlot uses textContent too).
'use strict';
(function () {
  const palette = ['#2563eb', '#dc2626', '#16a34a', '#9333ea', '#ea580c', '#0891b2',
    '#4d7c0f', '#be185d', '#854d0e', '#334155', '#0f766e', '#7c2d12'];
  const utc = (seconds) => new Date(seconds * 1e3).toISOString().slice(0, 19).replace('T', ' ');
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
      if (chart.time) series[0].value = (u, v) => (v == null ? '' : utc(v) + ' UTC');
      // eslint-disable-next-line no-new
      new window.uPlot({
        width: Math.min(560, holder.clientWidth || 560), height: 240,
        scales: { x: { time: chart.time } }, series,
        // The dashboard's one clock: UTC, 24-hour, on the axis and in the legend.
        tzDate: (ts) => window.uPlot.tzDate(new Date(ts * 1e3), 'Etc/UTC'),
        // Runs and training steps are counted in whole numbers: no tick at run 1.25.
        axes: chart.time
          ? [{ values: (u, ticks) => ticks.map((t) => utc(t).slice(11)) }, {}]
          : [{ incrs: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000] }, {}],
      }, [chart.x].concat(chart.series.map((s) => s.values)), box);
    }
  };
  window.raraCharts();
})();
