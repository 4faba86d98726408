// The book's tables fit its 750 px content column. A table wider than its box may break a long
// word in a cell (a check id, a sysctl key, a counter, a registry path, a range) after a dot,
// an underscore, a slash or backslash, `=`, `:` or a comma, or inside a CamelCase name: a <wbr>
// at each such place, which a copy of the text leaves out. A table that fits keeps its words
// whole, and words shorter than 12 characters keep only the breaks they had. Without scripts,
// mdbook's wrapper scrolls a wide table in its own box.
(function () {
    "use strict";
    function breakable(cell) {
        const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
        const texts = [];
        while (walker.nextNode()) texts.push(walker.currentNode);
        for (const text of texts) {
            const parts = text.data.split(/(\S{12,})/);
            if (parts.length < 2) continue;
            const frag = document.createDocumentFragment();
            parts.forEach(function (part, i) {
                if (i % 2 === 0) {
                    if (part) frag.appendChild(document.createTextNode(part));
                    return;
                }
                part.split(/(?<=[._\/\\=:,])(?=.)|(?<=[a-z])(?=[A-Z])/).forEach(function (piece, j) {
                    if (j > 0) frag.appendChild(document.createElement("wbr"));
                    frag.appendChild(document.createTextNode(piece));
                });
            });
            text.replaceWith(frag);
        }
    }
    for (const table of document.querySelectorAll("main table")) {
        if (table.offsetWidth <= table.parentElement.clientWidth) continue;
        table.querySelectorAll("td, th").forEach(breakable);
    }
})();
