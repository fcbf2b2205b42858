// Server-sent events from a fetch() body: yields each event's `data` (the lines after
// "data:" joined by "\n") as the bytes arrive. serve sends `data: {json}\n\n` blocks and
// ends with `data: [DONE]`.

export async function* sseData(body) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buf += value;
      // Lines end in "\r\n", "\r" or "\n". A "\r" at the very end may be the first half
      // of a "\r\n" split across two reads: it stays raw until the next read.
      const ready = buf.endsWith("\r") ? buf.length - 1 : buf.length;
      let text = buf.slice(0, ready).replace(/\r\n?/g, "\n");
      const held = buf.slice(ready);
      let end;
      while ((end = text.indexOf("\n\n")) >= 0) {
        const lines = text.slice(0, end).split("\n");
        text = text.slice(end + 2);
        const data = lines.filter((l) => l.startsWith("data:")).map((l) => l.slice(5).replace(/^ /, ""));
        if (data.length) yield data.join("\n");
      }
      buf = text + held;
    }
  } finally {
    // Stopped early (at [DONE], on an error, or aborted): let the body go.
    reader.cancel().catch(() => {});
  }
}
