// The chat page: streams an answer with `anatomy: true` and draws one heatmap row per token.
// A cell is one layer: in MoE layers its hue is the router's first expert, in dense layers
// its darkness the attention share on position 0. Hovering (or tapping) a row shows its top-5.
// Query parameters q, max, budget and think=1 fill the form, and q sends at once.
const $ = (id) => document.getElementById(id);
let model = null;

async function loadModel() {
  model = (await (await fetch('/v1/models')).json()).data[0];
  $('model').textContent = `${model.id} · ${model.layers} layers · ` +
    (model.experts ? `${model.experts} experts` : 'dense');
  $('legend').textContent = model.experts
    ? '(hue: first routed expert; hover: weights, top-5)' : '(darker: more attention on token 0)';
}

function body(text) {
  const messages = [{ role: 'user', content: text }];
  const b = { model: model.id, messages, stream: true, anatomy: true,
    max_tokens: Number($('max').value) || 64 };
  if ($('budget').value !== '') b.thinking_budget = Number($('budget').value);
  if ($('think').checked) {
    messages.push({ role: 'assistant', content: '<think>\n' });
    b.continue_final_message = true;
  }
  return b;
}

async function send(text) {
  if (!model) await loadModel();
  document.body.dataset.done = '';
  for (const id of ['thinking', 'answer', 'heatmap', 'status']) $(id).textContent = '';
  $('turns').textContent = ''; const u = document.createElement('div');
  u.className = 'user'; u.textContent = text; $('turns').append(u);
  $('thinking-pane').hidden = true; $('budget-note').textContent = '';
  const res = await fetch('/v1/chat/completions', { method: 'POST', body: JSON.stringify(body(text)) });
  if (!res.ok) { $('status').textContent = (await res.json()).error.message; document.body.dataset.done = 'error'; return; }
  const reader = res.body.getReader(); const dec = new TextDecoder(); let buf = '';
  for (;;) {
    const { value, done } = await reader.read(); if (done) break;
    buf += dec.decode(value, { stream: true });
    let at;
    while ((at = buf.indexOf('\n\n')) >= 0) {
      handle(buf.slice(0, at).replace(/^data: /, '')); buf = buf.slice(at + 2);
    }
  }
  document.body.dataset.done = '1';
}

function handle(data) {
  if (data === '[DONE]') return;
  const c = JSON.parse(data);
  if (c.error) { $('status').textContent = c.error.message; return; }
  const choice = (c.choices && c.choices[0]) || {}; const d = choice.delta || {};
  if (d.reasoning_content) { $('thinking-pane').hidden = false; $('thinking').textContent += d.reasoning_content; }
  if (d.content) $('answer').textContent += d.content;
  if (c.anatomy) row(c.anatomy);
  if (c.budget_cut) $('budget-note').textContent = `— cut at the budget of ${$('budget').value}`;
  if (choice.finish_reason) $('status').textContent = `finish: ${choice.finish_reason}`;
}

function showTop(f, r) {
  for (const p of document.querySelectorAll('.row.picked')) p.classList.remove('picked');
  r.classList.add('picked');
  const lines = f.top.map((t) => `${t.p.toFixed(3).padStart(6)}  ${JSON.stringify(t.text)}`);
  const where = f.budget_cut ? '  (injected by the budget)' : '';
  const head = `${JSON.stringify(f.text)}${where}, chosen among:\n`;
  $('top').textContent = f.top.length ? head + lines.join('\n') : `${JSON.stringify(f.text)}${where}`;
}

function cell(l, i) {
  const s = document.createElement('span'); s.className = 'cell';
  if (l.experts.length) {
    s.style.background = `hsl(${(360 * l.experts[0]) / model.experts},70%,55%)`;
    s.title = `layer ${i}: experts ` + l.experts.map((e, k) => `${e} (${l.weights[k].toFixed(2)})`).join(', ');
  } else {
    s.style.background = `hsl(220,70%,${Math.round(100 - 70 * l.sink)}%)`;
    s.title = `layer ${i}: sink share ${l.sink.toFixed(2)}`;
  }
  return s;
}

// Whitespace drawn visibly, so a row for a space or a newline is not blank.
const visible = (text) => text.replace(/ /g, '·').replace(/\n/g, '↵').replace(/\t/g, '→');

function header() {
  const r = document.createElement('div'); r.className = 'row head';
  const t = document.createElement('span'); t.className = 'tok'; t.textContent = 'layer →'; r.append(t);
  for (let i = 0; i < model.layers; i++) {
    const s = document.createElement('span'); s.className = 'cell';
    s.textContent = model.layers <= 16 || i % 5 === 0 ? i : ''; r.append(s);
  }
  $('heatmap').append(r);
}

function row(f) {
  if (!$('heatmap').children.length) header();
  const r = document.createElement('div'); r.className = 'row';
  const t = document.createElement('span'); t.className = 'tok'; t.textContent = visible(f.text); r.append(t);
  f.layers.forEach((l, i) => r.append(cell(l, i)));
  if (!f.layers.length) {
    const s = document.createElement('span'); s.className = 'injected'; s.textContent = 'injected by the budget'; r.append(s);
  }
  if (f.budget_cut) r.classList.add('cut');
  r.addEventListener('mouseenter', () => showTop(f, r));
  r.addEventListener('click', () => showTop(f, r));
  $('heatmap').append(r);
  document.body.dataset.rows = String($('heatmap').querySelectorAll('.row:not(.head)').length);
}

$('ask').addEventListener('submit', (e) => { e.preventDefault(); send($('q').value); });
const params = new URLSearchParams(location.search);
for (const k of ['max', 'budget']) if (params.get(k)) $(k).value = params.get(k);
if (params.get('think') === '1') $('think').checked = true;
loadModel().then(() => { const q = params.get('q'); if (q) { $('q').value = q; send(q); } });
