// The login page's one action: exchange the token for a session cookie.
document.getElementById("login").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const error = document.getElementById("error");
  error.hidden = true;
  let message;
  try {
    const r = await fetch("/api/login", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ token: document.getElementById("token").value }),
    });
    if (r.ok) {
      location.replace("/");
      return;
    }
    try { message = (await r.json()).error; } catch (_) { message = "HTTP " + r.status; }
  } catch (e) {
    message = "could not reach drainwatch: " + e;
  }
  error.textContent = message;
  error.hidden = false;
});
