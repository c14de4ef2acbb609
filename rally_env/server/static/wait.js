// A queued or verifying run: poll its status, reload the page when the verdict is in.
const id = location.pathname.split("/").pop();
async function poll() {
  try {
    const r = await fetch(`/api/v1/runs/${encodeURIComponent(id)}`);
    if (r.ok) {
      const d = await r.json();
      document.getElementById("status").textContent = d.status;
      if (d.status === "accepted" || d.status === "rejected") {
        location.reload();
        return;
      }
    }
  } catch (e) {
    // the server may be restarting: keep polling
  }
  setTimeout(poll, 1000);
}
setTimeout(poll, 1000);
