// The view tabs, following the WAI-ARIA tabs pattern: one tab in the Tab order, arrow keys, Home and End
// move between tabs and select them (automatic activation), and each tab shows its aria-controls panel.

/** Wires every [role=tab] button; returns a function that selects a tab by id. */
export function setupTabs(onSelect: (id: string) => void): (id: string) => void {
  const tabs = [...document.querySelectorAll<HTMLButtonElement>('[role="tab"]')];
  const select = (id: string) => {
    for (const tab of tabs) {
      const on = tab.id === id;
      tab.setAttribute('aria-selected', String(on));
      tab.tabIndex = on ? 0 : -1;
      document.getElementById(tab.getAttribute('aria-controls')!)!.hidden = !on;
    }
    document.body.dataset.view = id.replace('tab-', '');
    onSelect(id);
  };
  for (const tab of tabs) {
    tab.addEventListener('click', () => select(tab.id));
    tab.addEventListener('keydown', (e) => {
      const i = tabs.indexOf(tab);
      let j = i;
      if (e.key === 'ArrowRight') j = (i + 1) % tabs.length;
      else if (e.key === 'ArrowLeft') j = (i - 1 + tabs.length) % tabs.length;
      else if (e.key === 'Home') j = 0;
      else if (e.key === 'End') j = tabs.length - 1;
      else return;
      e.preventDefault();
      select(tabs[j].id);
      tabs[j].focus();
    });
  }
  return select;
}
