#!/bin/bash
printf 'echo $(($1 + $2))\n' > /app/calc.sh
