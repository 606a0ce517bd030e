// The page state in the URL hash (#text=…&causal=1&…), so a teacher can send a link that opens the exact
// sentence, model and switches. One decision to know: the hash is rewritten with history.replaceState
// (no history entry per keystroke), and unknown or malformed keys are ignored, never trusted.

const FIELDS = [
  'text',
  'source',
  'dModel',
  'dK',
  'heads',
  'layers',
  'seed',
  'blocked',
  'focusLayer',
  'focusHead',
];
const CHECKS = ['scaled', 'causal', 'tieQK'];

type Field = HTMLInputElement | HTMLTextAreaElement | HTMLSelectElement;
const field = (id: string) => document.getElementById(id) as Field | null;

/** Writes the controls' current values into the URL hash. */
export function saveToHash(): void {
  const params = new URLSearchParams();
  for (const id of FIELDS) {
    const el = field(id);
    if (el && el.value !== '') params.set(id, el.value);
  }
  for (const id of CHECKS) {
    const el = field(id) as HTMLInputElement | null;
    if (el) params.set(id, el.checked ? '1' : '0');
  }
  history.replaceState(null, '', `#${params.toString()}`);
}

/** Sets the controls from the URL hash; select values that do not exist yet are kept for later. */
export function loadFromHash(): { focusLayer?: number; focusHead?: number; blocked?: number } {
  const params = new URLSearchParams(location.hash.slice(1));
  const later: { focusLayer?: number; focusHead?: number; blocked?: number } = {};
  for (const id of FIELDS) {
    const value = params.get(id);
    if (value === null) continue;
    if (id === 'focusLayer' || id === 'focusHead' || id === 'blocked') {
      const k = Number(value);
      if (Number.isInteger(k)) later[id] = k;
      continue;
    }
    const el = field(id);
    if (el) el.value = value;
  }
  for (const id of CHECKS) {
    const value = params.get(id);
    const el = field(id) as HTMLInputElement | null;
    if (el && (value === '1' || value === '0')) el.checked = value === '1';
  }
  return later;
}
