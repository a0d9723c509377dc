module imexdra.local/imexprobe

go 1.26.0
