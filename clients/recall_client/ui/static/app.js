// recalld ui: the only script. Progressive enhancement: every page works without it.
// The overview's live figures: the server renders the fragment, this swaps it in.
"use strict";
(function () {
  const live = document.getElementById("live");
  if (!live || !window.EventSource) return;
  const source = new EventSource(live.dataset.events);
  source.addEventListener("overview", function (event) {
    // The fragment comes from this page's own server, rendered with every value escaped.
    live.innerHTML = event.data;
  });
})();
