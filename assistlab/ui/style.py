"""How the page looks: its theme and style sheet."""

import gradio as gr

CSS = """
/* width: the auto margins that centre the page would otherwise size it to its content (a flex item with auto
   margins is not stretched), so one wide table or tab bar made the whole page wider than a phone's screen. */
.gradio-container { max-width: 1760px !important; margin: 0 auto !important; width: 100% !important;
  overflow: clip !important; }  /* gradio's `hidden` would make it the scroll box that sticky parts stick in */
/* Gradio pads the page 32 px a side at every width. Gradio scopes the rules inside a @media block to what lies
   within .contain, and this padding lies outside it, so it narrows with the window instead: 8 px a side up to
   736 px, growing to gradio's 32 px at 760 px and above. */
.gradio-container .main.fillable.app { padding-left: clamp(8px, 100vw - 728px, 32px) !important;
  padding-right: clamp(8px, 100vw - 728px, 32px) !important;
  padding-top: clamp(4px, 100vw - 744px, 16px) !important; }  /* 4 px on a phone: Run and the tabs come sooner */
#al-header { display: flex; align-items: center; gap: 14px; padding: 6px 2px 2px; }
#al-header svg { width: 46px; height: 46px; flex: none; }
#al-header h1 { margin: 0; font-size: 1.55rem; font-weight: 650; letter-spacing: -0.01em; }
#al-header p { margin: 2px 0 0; color: var(--body-text-color-subdued); }
.al-progress { padding: 2px 2px 6px; }
.al-track { height: 8px; border-radius: 999px; background: var(--neutral-200); overflow: hidden; }
.al-fill { height: 100%; border-radius: 999px; background: var(--primary-500); transition: width .4s ease; }
.al-progress.al-idle .al-fill { background: transparent; }
.al-progress.al-done .al-fill { background: #0d9488; }
.al-progress.al-stopped .al-fill, .al-progress.al-failed .al-fill { background: #d97706; }
.al-progress.al-failed .al-fill { background: #dc2626; }
.al-progress.al-busy .al-fill { width: 35% !important; animation: al-slide 1.3s ease-in-out infinite; }
@keyframes al-slide { from { margin-left: -35%; } to { margin-left: 100%; } }
.al-label { font-size: .9rem; margin-top: 6px; color: var(--body-text-color-subdued); }
.al-headline { border-radius: 12px; padding: 14px 18px; background: var(--primary-50);
  border: 1px solid var(--primary-200); }
.al-headline p { margin: 4px 0; line-height: 1.45; }
.al-headline p.al-warning, .al-suite-summary p.al-warning { color: #b45309; font-weight: 560; }
.al-warning-details { font-size: .9rem; color: var(--body-text-color-subdued); margin: -4px 0 8px; }
.al-warning-details summary { cursor: pointer; }
.al-headline p.al-arm { font-size: 1.08rem; font-weight: 560; }
.al-headline p.al-note { color: var(--body-text-color-subdued); font-size: .92rem; }
.al-headline p.al-note.al-failed, p.al-note.al-failed { color: #b91c1c; font-weight: 560; }  /* not saved: a warning */
.al-dot { display: inline-block; width: 10px; height: 10px; border-radius: 50%; margin-right: 7px; }
.al-table { width: 100%; border-collapse: collapse; font-size: .88rem; border: none !important; margin: 0 !important; }
.al-table tr { border: none !important; }
.al-table th, .al-table td { padding: 6px 7px !important; border: none !important;
  border-bottom: 1px solid var(--border-color-primary) !important; text-align: right; white-space: nowrap;
  background: transparent !important; }
.al-table th:first-child, .al-table td:first-child { text-align: left; white-space: normal; min-width: 140px; }
.al-table th { font-weight: 600; color: var(--body-text-color-subdued); white-space: normal; vertical-align: bottom; }
.al-sub { color: var(--body-text-color-subdued); font-size: .8rem; }
/* Wide tables scroll inside their own box instead of widening the page. */
.al-wrap { overflow-x: auto; max-width: 100%; }
.al-history-row { cursor: pointer; }
.al-history-row:hover, .al-history-row:focus { background: var(--background-fill-secondary); }
.al-copy { margin-left: .4em; padding: 1px 8px; border: 1px solid var(--border-color-primary); border-radius: 4px; cursor: pointer; }
.al-texts { display: grid; grid-template-columns: repeat(auto-fit, minmax(260px, 1fr)); gap: 12px; }
.al-text-card { border: 1px solid var(--border-color-primary); border-radius: 10px; padding: 10px 12px;
  background: var(--background-fill-primary); min-width: 0; }
.al-text-card h4 { margin: 0 0 6px; font-size: .95rem; display: flex; align-items: center; flex-wrap: wrap; gap: 6px; }
.al-badge { font-size: .75rem; font-weight: 500; border-radius: 999px; padding: 1px 8px; }
.al-same { background: #ccfbf1; color: #115e59; }
.al-differs { background: #fef3c7; color: #92400e; }
.al-failed-badge { background: #fee2e2; color: #991b1b; }
.al-text { white-space: pre-wrap; word-break: break-word; font-family: var(--font-mono); font-size: .85rem;
  max-height: 320px; overflow-y: auto; margin: 0; line-height: 1.5; }
.al-text mark { background: transparent; color: inherit; text-decoration: underline 2px #dc2626;
  text-underline-offset: 3px; text-decoration-skip-ink: none; }
.al-text del { color: #b91c1c; background: #fee2e2; text-decoration: line-through; }
.al-o-draft { background: #ccfbf1 !important; }
.al-o-target { background: #e0e7ff !important; }
.al-text .al-o-draft, .al-text .al-o-target { border-radius: 2px; }
.al-legend { display: flex; flex-wrap: wrap; gap: 6px 18px; font-size: .84rem; margin: 2px 0 10px;
  color: var(--body-text-color-subdued); }
.al-legend > span { display: inline-flex; align-items: center; gap: 6px; }
.al-legend mark { background: transparent; color: inherit; text-decoration: underline 2px #dc2626;
  text-underline-offset: 3px; }
.al-legend del { color: #b91c1c; background: #fee2e2; }
.al-swatch { display: inline-block; width: 14px; height: 14px; border-radius: 3px; flex: none;
  border: 1px solid rgba(15, 23, 42, .12); }
.al-text-card > .al-sub { display: block; margin: -2px 0 6px; }
.al-why { display: grid; grid-template-columns: repeat(auto-fit, minmax(300px, 1fr)); gap: 12px; }
.al-why-card { border: 1px solid var(--border-color-primary); border-radius: 10px; padding: 10px 14px;
  background: var(--background-fill-primary); }
.al-why-card h4 { margin: 0 0 8px; font-size: .95rem; }
.al-why-nums { display: flex; gap: 28px; margin-bottom: 6px; }
.al-big { font-size: 1.25rem; font-weight: 620; }
.al-kv { border-collapse: collapse; font-size: .86rem; margin: 4px 0 !important; border: none !important; }
.al-kv tr { border: none !important; }
.al-kv th, .al-kv td { padding: 2px 10px 2px 0 !important; border: none !important; background: transparent !important;
  text-align: left; vertical-align: top; }
.al-kv th { font-style: italic; font-weight: 600; }
.al-kv td:nth-child(2) { font-variant-numeric: tabular-nums; text-align: right; }
.al-kv td:last-child { color: var(--body-text-color-subdued); }
.al-limit { margin: 6px 0 2px; font-size: .9rem; line-height: 1.45; }
.al-formula { margin-top: 8px !important; }
.al-h { margin: 14px 0 6px; font-size: .95rem; }
.al-ranking th:first-child, .al-ranking td:first-child { min-width: 0; width: 1%; text-align: center; }
.al-ranking th:nth-child(2), .al-ranking td:nth-child(2) { text-align: left; white-space: normal !important;
  min-width: 150px; }
.al-ranking th:last-child, .al-ranking td:last-child { white-space: normal !important; text-align: left;
  min-width: 220px; width: 36%; font-size: .84rem; }
/* Every column of a result table fits its box at a desktop width: words wrap, numbers stay whole, a long model
   name or id breaks where it must; on a phone what is still too wide scrolls inside the table's own box. */
.al-ranking td:nth-child(3) { white-space: normal !important; min-width: 7em; }
.al-history td, .al-board td, #al-suite-table td, #al-suite-prompts td { white-space: normal !important; }
.al-history td:nth-child(3), .al-history td:nth-child(4), .al-history td:last-child, .al-board td:nth-child(2),
#al-suite-table td:nth-child(2), #al-suite-prompts td:nth-child(1), #al-suite-prompts td:last-child {
  overflow-wrap: anywhere; min-width: 6em; text-align: left; }
.al-board th:first-child, .al-board td:first-child { min-width: 0; width: 1%; text-align: center; }
.al-history th:first-child, .al-history td:first-child { min-width: 6em; }
/* eleven columns beside the sidebar at 1440 px: tighter cell padding, and the short id needs no minimum */
.al-history th, .al-history td { padding-left: 4px !important; padding-right: 4px !important; }
.al-history td:last-child { min-width: 0; }
.al-board td:nth-child(5) { min-width: 10em; }
#al-suite-prompts td:last-child { min-width: 14em; }
.al-table td.al-prompt-cell { text-align: left; min-width: 9em; }
.al-sweep-best { font-weight: 560; margin: 6px 0 !important; }
/* The tuner's candidates: six columns whole in a results column at 1280-1920 px (names, settings and why wrap, a
   long word breaks where it must, the interval at its spaces); on a phone each candidate stacks (below). */
#al-tune-table td { white-space: normal; }
#al-tune-table td:nth-child(1), #al-tune-table td:nth-child(2), #al-tune-table td:nth-child(6) {
  overflow-wrap: anywhere; text-align: left; }
#al-tune-table th:nth-child(2), #al-tune-table th:nth-child(6) { text-align: left; }
#al-tune-table td:nth-child(2) { min-width: 8em; font-size: .84rem; }
#al-tune-table td:nth-child(3) { min-width: 7em; }
#al-tune-table td:nth-child(6) { min-width: 12em; font-size: .84rem; }
.al-tune-deploy { font-weight: 560; margin: 4px 0 !important; }
.al-env, .al-env p { font-size: .88rem !important; color: var(--body-text-color-subdued) !important; }
.al-progress.al-failed .al-label { color: #b91c1c; font-weight: 560; }
.al-headline p.al-lead { font-size: 1.15rem; font-weight: 640; margin-bottom: 8px; }
abbr.al-term { text-decoration: underline dotted 1px; text-underline-offset: 3px; cursor: help; }
.al-glossary { margin: 8px 0 4px; font-size: .86rem; }
.al-glossary summary { cursor: pointer; color: var(--primary-600); width: fit-content; }
.al-glossary dl { display: grid; grid-template-columns: max-content 1fr; gap: 4px 14px; margin: 8px 0 0; }
.al-glossary dt { font-weight: 600; }
.al-glossary dd { margin: 0; color: var(--body-text-color-subdued); }
.al-plain-row td { background: var(--neutral-50) !important; }
.al-prompt-note { margin: 0 0 10px !important; padding: 8px 12px; border-radius: 8px; font-size: .9rem;
  background: #fef3c7; color: #78350f; }
/* Notices sit at the bottom of the window, away from Run and Stop at the top of the results; on a phone, where
   Run and Stop are at the bottom of the screen, just above them. Both lie outside what gradio lets a @media
   rule reach, so the width picks with clamp: (760px - 100vw) * 1000 is hugely negative on a desktop and hugely
   positive on a phone. */
.toast-wrap { top: auto !important; bottom: clamp(var(--size-4), (760px - 100vw) * 1000, 72px) !important; }
.gradio-container { padding-bottom: clamp(0px, (760px - 100vw) * 1000, 64px) !important; }
/* A dropdown's words stop short of its arrow (gradio lets them run under it), ending in an ellipsis. */
.secondary-wrap > input { padding-right: calc(var(--size-5) * 2) !important; text-overflow: ellipsis; }
/* A desktop: the form is a sidebar that scrolls in its own box and stays in sight, and Run, Stop and the
   progress line stay at the top of the window while the results under them scroll, so a setting changed
   anywhere in the form is one press away from Run. */
@media (min-width: 761px) {
  /* nowrap: gradio lets a column wrap, and a column of bounded height wraps what does not fit into a second
     column beside the first: opening Settings put every box of it to the right, out of sight (issue 36). */
  #al-form { position: sticky; top: 0; align-self: flex-start; max-height: 100vh; overflow-y: auto;
    flex-wrap: nowrap !important; overscroll-behavior: contain; padding-right: 4px; }
  #al-form > * { flex-shrink: 0; }  /* the sidebar scrolls, not the accordion squeezed inside it */
  .al-runbar { position: sticky; top: 0; z-index: 20; background: var(--background-fill-primary);
    padding-bottom: 4px; }
}
/* A phone: the form above the results, and nothing wider than the screen. */
@media (max-width: 760px) {
  /* The models and the prompt, then Run and the tabs within the first screen or so: a smaller header, tighter
     gaps, the preset's hint left to its note. */
  #al-header { gap: 10px; padding-top: 0; }
  #al-form h3 { margin-bottom: 0 !important; }
  #al-header svg { width: 34px; height: 34px; }
  #al-header h1 { font-size: 1.25rem; }
  #al-header p { font-size: .84rem; line-height: 1.3; }
  #al-form, #al-main { gap: 8px !important; }
  #al-preset .info-text, #al-prompt .info-text { display: none; }  /* the prompt's limit is said when passed */
  #al-prompt textarea { max-height: 3.2em !important; }  /* two lines in sight; a longer prompt scrolls in its box */
  #al-form .al-env p { font-size: .8rem !important; line-height: 1.35; }
  /* Run and Stop stay at the bottom of the screen, in reach from any field (notices sit above them, and the
     page ends below them: see the top of this sheet). */
  .al-runrow { position: fixed !important; left: 0; right: 0; bottom: 0; z-index: 1000; margin: 0 !important;
    padding: 8px 8px calc(8px + env(safe-area-inset-bottom)); background: var(--background-fill-primary);
    box-shadow: 0 -2px 10px rgba(15, 23, 42, .12); }
  /* Plotly's toolbar would cover a chart's title on a narrow chart; zooming is for a larger screen. */
  .js-plotly-plot .modebar-container { display: none !important; }
  #al-main { flex-direction: column !important; flex-wrap: nowrap !important; }
  #al-main > .column, #al-main > div { min-width: 0 !important; width: 100% !important; }
  #al-main .form { min-width: 0 !important; }
  /* The tabs in as few rows as fit (five wrap onto a second row at 390 px), low enough that both rows end
     within the first screen or so. */
  #al-tabs .tab-container button { padding: 0 8px; height: 26px; }
  .al-glossary dl { grid-template-columns: 1fr; }
  .al-glossary dd { margin-bottom: 6px; }
  /* The tuner's candidates one under another, each cell after its column's name: six columns do not fit. */
  #al-tune-table thead { display: none; }
  #al-tune-table, #al-tune-table tbody, #al-tune-table tr, #al-tune-table td { display: block; width: 100%; }
  #al-tune-table tr { padding: 6px 0; border-bottom: 1px solid var(--border-color-primary); }
  #al-tune-table td { border: none !important; padding: 1px 0 !important; text-align: left; min-width: 0 !important; }
  #al-tune-table td::before { content: attr(data-label) ": "; font-weight: 600; color: var(--body-text-color-subdued); }
  #al-tune-table td:empty { display: none; }  /* a candidate still in has no why */
  /* Settings' side-by-side boxes one under another: two in a row left a dropdown's value cut ("transfor…"). */
  #al-settings .row, #al-settings .row > .form { flex-direction: column !important; flex-wrap: nowrap !important; }
  #al-settings .row > *, #al-settings .row > .form > * { min-width: 0 !important; width: 100% !important; }
}
"""



def theme() -> gr.themes.Base:
    return gr.themes.Soft(primary_hue="indigo", secondary_hue="teal", neutral_hue="slate")
