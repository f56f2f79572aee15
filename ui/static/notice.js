// The notice line above every page.

/** say shows a message above the page; '' hides it. */
export function say(text) {
  const notice = document.getElementById('notice');
  notice.textContent = text;
  notice.hidden = !text;
}
