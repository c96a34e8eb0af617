package console

import "strings"

// commonWords are words people build tokens from: the most common English
// words, and those of computing and operations. The token check's word
// model (wordProb) predicts letters that spell them.
const commonWords = `
a about above access account across act active add admin administrator after again against age agent ago air
alert all allow almost alone along already also always am amazing among an and animal another answer any api app
apple are area army around art as ask at auth away baby back bad bag ball bank base battery be bear beautiful
because bed been before begin being below best better between big bird black blue board boat body book boss
both box boy bread break bring brother brown build business but buy by call came can cannot car card care case
cat center change check child city class clean clear client close cloud code cold color come common company
computer config console control cool correct could country cover create cat data database day dead dear deep
default dev development did different do doctor does dog done door down dragon dream drive each early earth east
easy eat end enter even ever every example eye face fact fall family far fast father feel few field final find
fine fire first fish five fly follow food for force forest form found four free friend from front full fun game
garden gate get girl give go god going gold good got great green group grow guard hand happy hard has have he
head hear heart hello help her here high him his history hold home horse hot hour house how human hundred i ice
idea if important in inside into is it its job just keep key kind king know land large last late learn leave
left let life light like line lion list little live local log login long look lord lost love low machine made
magic main make man manager many master may me mean men might mind money monkey month moon more morning most
mother move much music must my name need network never new next nice night no node north not nothing now number
of off office often oil old on once one only open operator or order other our out over own page paper parent
part party pass password people person pick place plan play please point police power prod production program
public put queen question quick quite rain read ready real red remember rest right river road rock room root
round run safe said same say school sea second secret secure see sentinel server service set shall she ship
short should show side simple since sing sister sit six small snow so some something song soon sound south
space speak special spring staple star start state stay still stop story street strong student study such summer
sun super system table take talk team tell ten test than thank that the their them then there these they thing
think this those though three through time to today together token too top tree true try turn two under until
up upon us use user very wall want war was water way we week well were west what when where which while white
who why will wind window winter with without woman wonder word work world would write wrong year yes yet you
young your zero
`

// trieNode is a node of the trie of commonWords: below is how many words
// pass through each child, end how many end here.
type trieNode struct {
	next  [26]*trieNode
	below [26]int
	end   int
	total int // the sum of below and end
}

var wordTrie = func() *trieNode {
	root := &trieNode{}
	for _, w := range strings.Fields(commonWords) {
		n := root
		for i := 0; i < len(w); i++ {
			l := w[i] - 'a'
			if n.next[l] == nil {
				n.next[l] = &trieNode{}
			}
			n.below[l]++
			n.total++
			n = n.next[l]
		}
		n.end++
		n.total++
	}
	return root
}()

// wordStep is the trie node after letter l (0..25) from n: down the trie
// while the letters spell the start of a word, else a new word from the
// root (nil if no word starts with l).
func wordStep(n *trieNode, l int) *trieNode {
	if n != nil && n.next[l] != nil {
		return n.next[l]
	}
	return wordTrie.next[l]
}
