// Streams a chat answer and draws one heatmap row per token: per layer the first routed
// expert's colour (MoE) or the attention share on position 0 (dense); hover shows the top-5.
const $ = (id) => document.getElementById(id);
async function send(text) {
  const model = (await (await fetch('/v1/models')).json()).data[0];
  const body = { model: model.id, messages: [{ role: 'user', content: text }], stream: true, anatomy: true };
  const b = $('budget').value; if (b !== '') body.thinking_budget = Number(b);
  const res = await fetch('/v1/chat/completions', { method: 'POST', body: JSON.stringify(body) });
  const reader = res.body.getReader(); const dec = new TextDecoder(); let buf = '';
  for (;;) {
    const { value, done } = await reader.read(); if (done) break;
    buf += dec.decode(value, { stream: true });
    let at; while ((at = buf.indexOf('\n\n')) >= 0) { const line = buf.slice(0, at); buf = buf.slice(at + 2); handle(line.replace(/^data: /, ''), model); }
  }
  document.body.dataset.done = '1';
}
function handle(data, model) {
  if (data === '[DONE]') return;
  const c = JSON.parse(data); const d = (c.choices && c.choices[0] && c.choices[0].delta) || {};
  if (d.reasoning_content) $('thinking').textContent += d.reasoning_content;
  if (d.content) $('answer').textContent += d.content;
  if (c.anatomy) row(c.anatomy, model);
}
function row(f, model) {
  const r = document.createElement('div'); r.className = 'row';
  r.title = f.top.map((t) => JSON.stringify(t.text) + ' ' + t.p.toFixed(3)).join('\n');
  const t = document.createElement('span'); t.className = 'tok'; t.textContent = f.text; r.append(t);
  for (const l of f.layers) {
    const s = document.createElement('span'); s.className = 'cell';
    s.style.background = l.experts.length ? `hsl(${(360 * l.experts[0]) / model.experts},70%,55%)` : `hsl(220,70%,${100 - 60 * l.sink}%)`;
    r.append(s);
  }
  if (f.budget_cut) r.classList.add('cut');
  $('heatmap').append(r);
}
$('ask').addEventListener('submit', (e) => { e.preventDefault(); send($('q').value); });
const q = new URLSearchParams(location.search).get('q'); if (q) { $('q').value = q; send(q); }
