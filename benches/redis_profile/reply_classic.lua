-- (b) The classic script's reply: two integers and two numbers as strings.
-- call:
return { 1, 999999, '-1', tostring(0.001) }
