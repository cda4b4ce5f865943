#!/bin/bash
cat > /srv/words/count.sh <<'SCRIPT'
#!/bin/sh
tr -s '[:space:]' '\n' < "$1" | grep -v '^$' | sort | uniq -c | sort -k1,1nr -k2,2 | awk '{print $2, $1}'
SCRIPT
chmod +x /srv/words/count.sh
