// "Stream as I type": which part of the text box goes out next, the way an LLM streams tokens.
// Only whole words are sent while typing (a word ends at whitespace); a line break sends the
// rest and a flush. Text already sent cannot be taken back: after an edit before that point,
// sending resumes from the last word boundary both versions share.

/** Length of the longest common prefix of a and b, cut back to just after a whitespace. */
export function sharedWordPrefix(a, b) {
  let n = 0;
  const max = Math.min(a.length, b.length);
  while (n < max && a[n] === b[n]) n++;
  if (n === a.length && n === b.length) return n;
  while (n > 0 && !/\s/.test(a[n - 1])) n--;
  return n;
}

/**
 * @param {string} text what the box holds now
 * @param {string} sent what was sent so far (a prefix of some earlier text)
 * @param {boolean} final send everything (a line break was typed)
 * @returns {{piece: string, sent: string}} piece to send now ("" for nothing) and the new `sent`
 */
export function nextPiece(text, sent, final = false) {
  const keep = text.startsWith(sent) ? sent.length : sharedWordPrefix(sent, text);
  const rest = text.slice(keep);
  let cut = rest.length;
  if (!final) {
    const m = rest.match(/\s+(?=\S*$)/);  // the last run of whitespace that ends a word
    cut = m && /\S/.test(rest.slice(0, m.index)) ? m.index + m[0].length : 0;
  }
  const piece = rest.slice(0, cut);
  return { piece, sent: text.slice(0, keep) + piece };
}

// Cartesia's transcript tags (api/text/markup.py): markup the server reads, never a word it speaks.
// A <spell> span's content is one word in the timestamps, as it stands between its tags.
const TAG = /<\/?(?:break|speed|volume|emotion|spell)\b[^<>]*>/gi;

/** Whitespace-separated tokens in text, tags left out: what the server's word timestamps count.
 *  Give it the whole text sent, not piece by piece: a tag typed in two pieces is still one tag. */
export function countWords(text) {
  const words = text.replace(TAG, " ").trim().split(/\s+/);
  return words[0] === "" ? 0 : words.length;
}
