// The book's tables fit its 750 px column. A long word in a table cell (a check id, a sysctl
// key, a counter, a registry path, a range) may break after a dot, an underscore, a slash or
// backslash, `=`, `:` or a comma, or inside a CamelCase name, instead of widening the table
// past the column: a <wbr> at each such place, which a copy of the text leaves out. Words
// shorter than 12 characters keep only the breaks they had. Without scripts, mdbook's wrapper
// scrolls a wide table in its own box.
(function () {
    "use strict";
    const cells = document.querySelectorAll("main table td, main table th");
    for (const cell of cells) {
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
})();
